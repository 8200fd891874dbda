#!/usr/bin/env bash
# Where Redis's CPU goes inside the scripts during target 2 (256 keys, 4 x 64,
# hold 1 ms, --no-rtt): `perf record --call-graph dwarf` on a redis-server
# 7.0.15 built from source with its symbols (Debian's is stripped, and Lua's
# functions are static), for relaylock before (f9682a5) and after (efe9f14)
# the integer replies, and for the fenced floor; then the inclusive share of
# the functions that matter, in µs per acquisition (share x the bench's Redis
# CPU per acquisition).
#
#   git clone -q --depth 1 --branch 7.0.15 https://github.com/redis/redis /tmp/redis-src
#   make -C /tmp/redis-src -j2 OPTIMIZATION=-O2
#   cp <f9682a5 build> /tmp/relaylock-before; cp target/release/relaylock /tmp/relaylock-after
#   docs/results/fleet/lean/profile.sh > docs/results/fleet/lean/profile.txt
set -euo pipefail
RS=${RS:-/tmp/redis-src/src/redis-server}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
echo '```text'
echo "redis-server $($RS --version | awk '{print $3}') (built from source, -O2); $(nproc) cores"
for run in before:pubsub after:pubsub after:floor:10; do
  build=${run%%:*}; strategy=${run#*:}
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  $RS --port "$port" --save '' --appendonly no --daemonize yes --logfile "$work/log" --pidfile "$work/pid"
  sleep 0.5
  ( sleep 3; perf record -F 999 --call-graph dwarf,16384 -p "$(cat "$work/pid")" -o "$work/perf.data" -- sleep 6 >/dev/null 2>&1 ) &
  line=$(/tmp/relaylock-$build bench --url "redis://127.0.0.1:$port" --keys 256 --workers 64 --processes 4 \
    --hold-ms 1 --no-rtt --strategy "$strategy" --duration 12s 2>/dev/null | tail -1)
  wait
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  cpu=$(echo "$line" | awk '{print $12}')
  echo "--- $build $strategy: $(echo "$line" | awk '{print $5 " acq/s, Redis CPU " $12 " us/acq"}')"
  perf report -i "$work/perf.data" --stdio --children -g none --sort symbol 2>/dev/null | grep '%' |
    python3 -c '
import re, sys
cpu = float(sys.argv[1])
want = {
  "evalGenericCommand": "EVALSHA, all of it",
  "luaCreateArray": "  KEYS and ARGV tables",
  "lua_pcall": "  the script run",
  "luaRedisGenericCommand": "    redis.call, all of it",
  "scriptCall": "      the commands themselves",
  "luaC_step": "    Lua garbage collection in the run",
  "luaS_newlstr": "  Lua string creation (hashes every byte)",
  "luaReplyToRedisReply": "  the reply, Lua to RESP",
  "lua_gc": "  the collector step after scripts",
  "readQueryFromClient": "reading and running requests",
  "handleClientsWithPendingWrites": "writing replies and messages",
}
seen = {}
for l in sys.stdin:
    m = re.match(r"\s*([\d.]+)%\s+[\d.]+%\s+\[.\]\s+(\S+)", l)
    if m and m.group(2) in want and m.group(2) not in seen:
        seen[m.group(2)] = float(m.group(1))
for k, label in want.items():
    p = seen.get(k, 0.0)
    print(f"{label:45} {p:5.1f} %  {p * cpu / 100:6.2f} us/acq")' "$cpu"
done
echo '```'
