#!/usr/bin/env bash
# What a fleet scenario's requests and script calls are: the bench against a
# redis-server of its own, then every command's count from INFO commandstats.
# Arguments: processes, keys (64 workers per process, hold 1 ms, 6 s).
#
#   R=target/release/relaylock docs/results/fleet/commandstats.sh 12 1 > docs/results/fleet/commandstats12.txt
#   R=target/release/relaylock docs/results/fleet/commandstats.sh 4 256 > docs/results/fleet/commandstats256.txt
#
# With 12 processes on one key: one release and one take per acquisition, the
# rest is per process. With 4 processes on 256 keys: beside one release and
# the acquire calls (att/acq) per acquisition, the rest of the EVALSHAs are
# queue LEAVEs.
set -euo pipefail
R=${R:-target/release/relaylock}
processes=${1:?processes}
keys=${2:?keys}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --save '' --appendonly no --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
sleep 0.5
echo '```text'
"$R" bench --url "redis://127.0.0.1:$port" --processes "$processes" --workers 64 --keys "$keys" --hold-ms 1 \
  --no-rtt --strategy pubsub --duration 6s 2>/dev/null | tail -2
echo "--- INFO commandstats: command calls"
redis-cli -p "$port" info commandstats | grep -v '^#' | tr -d '\r' | sed -E 's/cmdstat_([a-z|]+):calls=([0-9]+),.*/\1 \2/' | sort
echo '```'
