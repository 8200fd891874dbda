#!/usr/bin/env bash
# Where redis-server's CPU goes during the uncontended fleet scenario of the
# fleet-cost issue (10,000 keys, 4 processes x 64 workers, hold 0, --no-rtt),
# relaylock (pubsub) against the bare lock (bare:10): `perf record` on the
# redis-server process for 6 s in the middle of each 12 s run, then the share
# of its samples by library and by function, and INFO commandstats.
#
#   docs/results/perf/run.sh > docs/results/perf/uncontended.md
#
# (A fenced text block, spliced into docs/benchmarks.md by render.sh. perf
# names the binary redis-check-rdb: Debian ships one binary under both
# names; it is shown as redis-server.)
#
# Needs perf (linux-perf) and a release build of the CLI
# (cargo build --release -p relaylock-cli). redis-server is Debian's 7.0.15:
# stripped, but its exported symbols name most functions; the one hot static
# function, Lua's string interning (luaS_newlstr, found by its disassembly:
# the loop h ^= (h<<5) + (h>>2) + byte over EVERY byte of the string), is
# named here by its address range in that build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=${R:-target/release/relaylock}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --save '' --appendonly no --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
sleep 0.5
pid=$(cat "$dir/redis.pid")
build=$(readelf -n /usr/bin/redis-server | awk '/Build ID/ {print $3}')
echo '```text'
echo "redis-server $(redis-server --version | awk '{print $3}') build-id $build; $(nproc) cores; commit $(git rev-parse --short HEAD)"
for s in pubsub bare:10; do
  redis-cli -p "$port" config resetstat >/dev/null
  ( sleep 3; perf record -F 1999 -g -p "$pid" -o "$dir/perf.data" -- sleep 6 >/dev/null 2>&1 ) &
  "$R" bench --url "redis://127.0.0.1:$port" --keys 10000 --workers 64 --processes 4 --hold-ms 0 \
    --no-rtt --strategy "$s" --duration 12s 2>/dev/null | tail -2
  wait
  echo "--- $s: redis-server samples by library"
  perf report -i "$dir/perf.data" --stdio --no-children -g none --sort dso 2>/dev/null | grep '%' | head -6 | sed 's/redis-check-rdb/redis-server   /'
  echo "--- $s: by function (top 12; luaS_newlstr by address)"
  perf report -i "$dir/perf.data" --stdio --no-children -g none --sort symbol 2>/dev/null | grep '%' |
    python3 -c '
import re, sys
shares = {}
for line in sys.stdin:
    m = re.match(r"\s*([\d.]+)%\s+\[.\]\s+(\S+)", line)
    if not m:
        continue
    p, sym = float(m.group(1)), m.group(2)
    if sym.startswith("0x"):
        a = int(sym, 16)
        sym = "luaS_newlstr (string interning hash)" if 0x15e670 <= a < 0x15e800 else "unnamed static functions"
    shares[sym] = shares.get(sym, 0) + p
for sym, p in sorted(shares.items(), key=lambda kv: -kv[1])[:12]:
    print(f"{p:6.1f}%  {sym}")'
  echo "--- $s: INFO commandstats (calls, usec_per_call)"
  redis-cli -p "$port" info commandstats | grep -E 'evalsha|cmdstat_(get|set|time|del|publish):' |
    sed -E 's/cmdstat_([a-z|]+):calls=([0-9]+),usec=[0-9]+,usec_per_call=([0-9.]+).*/\1 calls=\2 us_per_call=\3/'
done
echo '```'
