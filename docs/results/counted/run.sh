#!/usr/bin/env bash
# Redis's instructions per acquisition, counted (callgrind), for relaylock's
# protocol 4 as relaylock sends it (src/calls/mod.rs: ACQUIRE and RELEASE,
# each script assembled from its .lua files as src/scripts/mod.rs does), for
# the MULTI design it replaced, for protocol 3 before it, for the bench's
# fenced floor and for the bare lock:
#
#   relaylock   this working tree's protocol 4 (keys p:4:{bench:<i>}). Every
#               take is ACQUIRE (lean arguments), whose first command, SET
#               p:4:{k} <token> NX PX <lease>, takes a free lock: then
#               EXISTS of the lock's voids key p:4:{k}:void (a void marker
#               of this token is checked only where it exists; never here),
#               and the fence comes from the record p:4:{k}:f (HGET, TIME,
#               HSET, PEXPIRE: fence.lua's next_fence); the value is the
#               token alone. Otherwise the script queues the caller, takes a
#               reservation or recognises a replay. A refused try answers
#               -3 - pttl, a take a fence. Every release is RELEASE (lean
#               arguments), with the fence its take answered; releasing a
#               hold the SET NX took with nobody queued runs its first lines
#               only (GET, DEL, and the fence written into the record's
#               ring: HSET of the slot of fence mod 32). No MULTI, no SEED,
#               no marks.
#   multi       the design protocol 4 replaced (docs/design.md, "The designs
#               measured"), measured and not kept: its scripts of commit
#               940c831 (variants.py's MULTI: ACQUIRE, RELEASE and SEED as
#               its src/scripts/mod.rs assembled them), driven as its client
#               drove them. A try on the fast path is one MULTI: SET
#               p:4:{k} <token> NX PX <lease>, HINCRBY p:4:{k}:f f 1 (the
#               fence), PEXPIRE p:4:{k}:f <lease + 60000> GT, EXEC; SEED
#               follows when the HINCRBY answered 2^48 or less (a new
#               record; never here). A call's first try takes the fast path
#               only for a lock marked so (its src/calls/fenced.rs: marked
#               when a call's first try took it free by ACQUIRE, forgotten
#               when a MULTI found it taken); every other try is ACQUIRE,
#               which answers {2, fence} for a take where others wait or
#               from a reservation. So uncontended every take is the MULTI,
#               and in a hand-over every try is ACQUIRE (after the first
#               cycles, which both runs count). Releases as relaylock's.
#   protocol-3  the scripts of the last commit of protocol 3 (variants.py's
#               PROTOCOL_3): every take is the ACQUIRE script, every release
#               RELEASE, one value per lock holding its ring of released
#               fences as text; driven as this harness drove them then (keys
#               p:3:{bench:<i>})
#   floor       floor:<ms>'s scripts (relaylock-cli/src/bench/bare.rs), its
#               retention written into the release
#   bare        the bare lock: `SET key token NX PX` and the seeds' release
#               script (relaylock-cli/src/bench/bare.rs)
#
# The floor and the bare lock keep the keys p:3:{bench:<i>} (as long as
# protocol 4's). The variants no-record-ttl (the MULTI without its PEXPIRE)
# and multi-always (the MULTI on every call's first try, no marks), counted
# while the MULTI design was current, are gone with it; so are the
# ablations of protocol 3 counted before (no-ring, no-times, fast-take,
# text-fence: counted.txt as of a7df68a).
#
# The scenarios are harness.py's: 256 keys, pipelined, one cycle of every key
# per batch (a release sends the fence its take answered in the batch
# before). Uncontended is a release and a take by one client (relaylock:
# RELEASE's first lines, then ACQUIRE's SET NX and the record; multi: the
# same release, then the MULTI); contended the hand-over between two
# clients: the other client's try that the lock refuses (ACQUIRE, which
# queues it), the holder's release, which reserves the lock for it, and its
# next try (ACQUIRE), which takes the reservation. Every reply is checked,
# and a run stops at the first unexpected one (see harness.py); after each
# run, protocol 4's values are read back (the token alone uncontended,
# <token>:<fence>|| contended), as many reads in a run of 40 cycles as in one
# of 80. A count is the
# whole server's (reading requests, queueing a MULTI's commands, EVALSHA's
# tables, the script, the commands, replies; the kernel's reads and writes
# are not counted): the difference between a run of 80 cycles and one of
# 40, per acquisition, so the start, the loading and the warm-up cancel out,
# and both runs end with every key's ring full (protocol 3's, text in the
# value, fills in about 25 releases; protocol 4's, 32 fields of the record,
# in 32 releases). Then, for every variant, the same difference for the
# functions that matter (inclusive), and the SHA-1 of each script counted.
#
# Needs valgrind and a redis-server 7.0.15 with its symbols (Debian's is
# stripped, and Lua's functions are static):
#   git clone -q --depth 1 --branch 7.0.15 https://github.com/redis/redis /tmp/redis-src
#   make -C /tmp/redis-src -j2 OPTIMIZATION=-O2
#   docs/results/counted/run.sh > docs/results/counted.txt
#   docs/results/counted/run.sh > docs/results/counted-rerun.txt
# VARIANTS (space-separated, default all five) counts only some; JOBS
# (default 1) runs that many servers at once: with JOBS=2 on 2 cores a run
# takes 5 minutes (6 on a busy machine). A rerun gives the same figures
# within 1 % (the bare lock's, the smallest count, within 3 %): the server's
# timer (serverCron, 10 times a second) runs more often in a slower run,
# and protocol 3's ring of differences has as many digits as the time
# between a key's cycles. A run that gets an
# unexpected reply stops (harness.py's checks) and prints no figures.
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
  local ok=0
  (cd "$work" && PORT=$port ROUNDS=1 CYCLES=$3 SCEN=$2 python3 "$here/harness.py" "$1" >/dev/null) || ok=$?
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  # A run with an unexpected reply counts nothing (xargs then fails, and so
  # does this script).
  [ "$ok" = 0 ] || { echo "harness.py failed: $1 $2 $3" >&2; rm -f "$out"; exit 1; }
}
export -f count; export RS work here
for scenario in uncontended contended; do
  for v in ${VARIANTS:-relaylock multi protocol-3 floor bare}; do
    echo "$v $scenario 40"; echo "$v $scenario 80"
  done
done | xargs -P "${JOBS:-1}" -L 1 bash -c 'count "$@"' _
echo '```text'
scripts=$(git -C "$root" rev-parse --short HEAD)
[ -z "$(git -C "$root" status --porcelain -- src/scripts relaylock-cli/src/bench/bare.rs)" ] ||
  scripts="$scripts's working tree (scripts changed, uncommitted)"
p3=$(sed -n "s/^PROTOCOL_3 = '\(.*\)'$/\1/p" "$here/variants.py")
multi=$(sed -n "s/^MULTI = '\(.*\)'$/\1/p" "$here/variants.py")
echo "redis-server $("$RS" --version | awk '{print $3}') (built from source, -O2), under callgrind; scripts of $scripts, multi's of $multi, protocol-3's of $p3"
python3 "$here/count.py" "$work"
echo '```'
