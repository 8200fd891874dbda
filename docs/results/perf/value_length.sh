#!/usr/bin/env bash
# What the length of a value costs a script in Redis 7.0, pipelined (one
# client, 16 in flight; Redis's CPU per call from INFO commandstats): a script
# that GETs a value, rebuilds it as relaylock's scripts do (splits off the
# first field, concatenates it back) and SETs it, for values of 40 and 600
# bytes (a lock's value with an empty ring, and with a full ring of 32
# fences), and the bare GET+SET script on the same values. Last, the ring
# kept in a list of its own instead (`ringlist`): the same rebuild of a
# 40-byte value, plus LPUSH of a 16-digit fence, LTRIM to 32 and PEXPIRE;
# and in a fixed-size record of 32 slots (`ringslot`): the same rebuild plus
# SETRANGE of one 16-byte slot and PEXPIRE.
#
#   docs/results/perf/value_length.sh > docs/results/perf/value-length.md
set -euo pipefail
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --save '' --appendonly no --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
sleep 0.5
plain=$(redis-cli -p "$port" script load "local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], v) return 1")
rebuild=$(redis-cli -p "$port" script load "local v = redis.call('GET', KEYS[1])
local i = string.find(v, '|', 1, true)
local head, rest = string.sub(v, 1, i - 1), string.sub(v, i + 1)
redis.call('SET', KEYS[1], head .. '|' .. rest) return 1")
ringlist=$(redis-cli -p "$port" script load "local v = redis.call('GET', KEYS[1])
local i = string.find(v, '|', 1, true)
local head, rest = string.sub(v, 1, i - 1), string.sub(v, i + 1)
redis.call('SET', KEYS[1], head .. '|' .. rest)
redis.call('LPUSH', KEYS[2], ARGV[1]) redis.call('LTRIM', KEYS[2], 0, 31)
redis.call('PEXPIRE', KEYS[2], 60000) return 1")
ringslot=$(redis-cli -p "$port" script load "local v = redis.call('GET', KEYS[1])
local i = string.find(v, '|', 1, true)
local head, rest = string.sub(v, 1, i - 1), string.sub(v, i + 1)
redis.call('SET', KEYS[1], head .. '|' .. rest)
redis.call('SETRANGE', KEYS[2], 16 * (tonumber(ARGV[2]) % 32), ARGV[1])
redis.call('PEXPIRE', KEYS[2], 60000) return 1")
echo '```text'
echo "redis-server $(redis-server --version | awk '{print $3}'); $(nproc) cores; 300,000 calls per row, 16 pipelined"
printf '%-8s %6s %12s\n' script bytes us_per_call
for bytes in 40 600; do
  value="$(printf 'a%.0s' $(seq 1 20))|$(printf '1%.0s' $(seq 1 $((bytes - 21))))"
  redis-cli -p "$port" set k "$value" >/dev/null
  for name in plain rebuild; do
    sha=${!name}
    redis-cli -p "$port" config resetstat >/dev/null
    redis-benchmark -p "$port" -n 300000 -P 16 -c 1 -q evalsha "$sha" 1 k >/dev/null
    us=$(redis-cli -p "$port" info commandstats | sed -nE 's/cmdstat_evalsha:.*usec_per_call=([0-9.]+).*/\1/p')
    printf '%-8s %6s %12s\n' "$name" "$bytes" "$us"
  done
done
value="$(printf 'a%.0s' $(seq 1 20))|$(printf '1%.0s' $(seq 1 19))"
redis-cli -p "$port" set k "$value" >/dev/null
redis-cli -p "$port" config resetstat >/dev/null
redis-benchmark -p "$port" -n 300000 -P 16 -c 1 -q evalsha "$ringlist" 2 k ring 1795399299390602 >/dev/null
us=$(redis-cli -p "$port" info commandstats | sed -nE 's/cmdstat_evalsha:.*usec_per_call=([0-9.]+).*/\1/p')
printf '%-8s %6s %12s\n' ringlist 40 "$us"
redis-cli -p "$port" config resetstat >/dev/null
redis-benchmark -p "$port" -n 300000 -P 16 -c 1 -r 1000000 -q evalsha "$ringslot" 2 k slots 1795399299390602 __rand_int__ >/dev/null
us=$(redis-cli -p "$port" info commandstats | sed -nE 's/cmdstat_evalsha:.*usec_per_call=([0-9.]+).*/\1/p')
printf '%-8s %6s %12s\n' ringslot 40 "$us"
echo '```'
