#!/usr/bin/env bash
# Redis's instructions per acquisition, counted (callgrind), for relaylock's
# ACQUIRE and RELEASE as src/scripts/ has them (each constant assembled from
# its .lua files as src/scripts/mod.rs does), for the bench's fenced floor,
# and for variants of relaylock's scripts that each drop one thing:
#
#   relaylock   the scripts of this checkout
#   no-ring     RELEASE keeps no ring of released fences (it reads no newest
#               fence and writes an empty ring): what recognising a replayed
#               release costs
#   no-times    ACQUIRE writes no queue-times record (`<lock>:q`: TIME, HSET,
#               PEXPIRE): what `relaylock status`'s "waited" column costs
#   fast-take   ACQUIRE with a fast path for a free tombstone with no queue
#               and an empty void field (a design tried, not kept)
#   text-fence  ACQUIRE compares the last fence as text and parses it only
#               when it is not older than the server's time (tried, not kept)
#   floor       floor:<ms>'s scripts (relaylock-cli/src/bench/bare.rs), its
#               retention written into the release
#   bare        the bare lock: `SET key token NX PX` and the seeds' release
#               script (relaylock-cli/src/bench/bare.rs)
#
# The scenarios are harness.py's: 256 keys, pipelined; uncontended is a
# release and a take by one client, contended the hand-over between two
# clients (a refused try that queues, the release that reserves the lock for
# the other client, its take). A count is the whole server's (reading
# requests, EVALSHA's tables, the script, replies): the difference between a
# run of 80 cycles and one of 40, per acquisition, so the start and the
# loading cancel out, and both runs end with every key's ring full (it fills
# in about 25 releases). Then, for relaylock and the floor, the same
# difference for the functions that matter (inclusive).
#
# Needs valgrind and a redis-server 7.0.15 with its symbols (Debian's is
# stripped, and Lua's functions are static):
#   git clone -q --depth 1 --branch 7.0.15 https://github.com/redis/redis /tmp/redis-src
#   make -C /tmp/redis-src -j2 OPTIMIZATION=-O2
#   docs/results/counted/run.sh > docs/results/counted.txt
#   docs/results/counted/run.sh > docs/results/counted-rerun.txt
# VARIANTS (space-separated, default all seven) counts only some; JOBS
# (default 1) runs that many servers at once. A rerun gives the same
# figures within 3 % (the bare lock's, the smallest count; the rest within
# 2 %): the server's timer (serverCron, 10 times a second) runs more often
# in a slower run, and the ring's differences have as many digits as the
# time between a key's cycles.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
RS=${RS:-/tmp/redis-src/src/redis-server}
[ -x "$RS" ] || { echo "no redis-server with symbols at $RS (see this script's header)" >&2; exit 1; }
for tool in valgrind redis-cli callgrind_annotate; do
  command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 1; }
done
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 "$here/variants.py" "$root" "$work"

# count VARIANT SCENARIO CYCLES: run harness.py once under callgrind.
count() {
  local port out pid
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  out="$work/cg.$1.$2.$3"
  valgrind --tool=callgrind --callgrind-out-file="$out" "$RS" --port "$port" --save '' \
    --appendonly no >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  redis-cli -p "$port" ping >/dev/null 2>&1 ||
    { kill "$pid"; echo "redis-server under valgrind did not start" >&2; exit 1; }
  (cd "$work" && PORT=$port ROUNDS=1 CYCLES=$3 SCEN=$2 python3 "$here/harness.py" "$1" >/dev/null)
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
}
export -f count; export RS work here
for scenario in uncontended contended; do
  for v in ${VARIANTS:-relaylock no-ring no-times fast-take text-fence floor bare}; do
    echo "$v $scenario 40"; echo "$v $scenario 80"
  done
done | xargs -P "${JOBS:-1}" -L 1 bash -c 'count "$@"' _
echo '```text'
echo "redis-server $("$RS" --version | awk '{print $3}') (built from source, -O2), under callgrind; scripts of $(git -C "$root" rev-parse --short HEAD)"
python3 "$here/count.py" "$work"
echo '```'
