#!/usr/bin/env bash
# What the script calls of the 256-key, 4-process scenario are (issue 23,
# target 2): beside one release and the acquire calls (att/acq) per
# acquisition, the rest of the EVALSHAs are queue LEAVEs. The bench against a
# redis-server of its own, then every command's count from INFO commandstats.
#
#   R=target/release/relaylock docs/results/fleet/commandstats256.sh > docs/results/fleet/commandstats256.txt
set -euo pipefail
R=${R:-target/release/relaylock}
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
redis-server --port "$port" --save '' --appendonly no --daemonize yes --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
sleep 0.5
echo '```text'
"$R" bench --url "redis://127.0.0.1:$port" --processes 4 --workers 64 --keys 256 --hold-ms 1 --no-rtt \
  --strategy pubsub --duration 6s 2>/dev/null | tail -2
echo "--- INFO commandstats: command calls"
redis-cli -p "$port" info commandstats | grep -v '^#' | tr -d '\r' | sed -E 's/cmdstat_([a-z|]+):calls=([0-9]+),.*/\1 \2/' | sort
echo '```'
