# Sourced by the benchmark shell scripts: starts a throwaway redis-server
# (${REDIS_SERVER:-redis-server}, no persistence) on a free loopback port,
# sets $url to it, and stops it and removes its folder when the sourcing
# script exits. Fails if it does not answer PING within 5 s.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tmp=$(mktemp -d)
${REDIS_SERVER:-redis-server} --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$tmp" --logfile "$tmp/redis.log" &
redis_pid=$!
trap 'kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
url=redis://127.0.0.1:$port
for _ in $(seq 50); do
  [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && break
  sleep 0.1
done
[ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] || { echo "redis-server did not start" >&2; exit 1; }
