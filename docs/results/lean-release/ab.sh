#!/usr/bin/env bash
# Two relaylock builds side by side, uncontended (10,000 keys, 64 workers,
# hold 0, pubsub, 6 s), alternating on one redis-server, three runs each. One
# JSON line per run, with the build's label prepended.
#
#   git worktree add /tmp/before efc2919 && (cd /tmp/before && cargo build --release -p relaylock-cli)
#   docs/results/lean-release/ab.sh /tmp/before/target/release/relaylock target/release/relaylock > docs/results/lean-release/ab.jsonl
set -euo pipefail
before=$1 after=$2
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
tmp=$(mktemp -d)
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" &
pid=$!
trap 'kill "$pid"; wait "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
until [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; do sleep 0.1; done
for i in 1 2 3; do
  for b in before after; do
    bin=$before; [ $b = after ] && bin=$after
    "$bin" bench --url "redis://127.0.0.1:$port" --keys 10000 --workers 64 --hold-ms 0 --strategy pubsub \
      --duration 6s --json 2>/dev/null | sed "s/^{/{\"build\":\"$b\",/"
  done
done
