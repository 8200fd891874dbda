#!/usr/bin/env bash
# Two relaylock builds side by side, uncontended (10,000 keys, 64 workers,
# hold 0, pubsub, 6 s), alternating on one redis-server, three runs each. One
# JSON line per run, with the build's label prepended.
#
#   git worktree add /tmp/before efc2919 && (cd /tmp/before && cargo build --release -p relaylock-cli)
#   docs/results/lean-release/ab.sh /tmp/before/target/release/relaylock target/release/relaylock > docs/results/lean-release/ab.jsonl
set -euo pipefail
before=$1 after=$2
. "$(dirname "${BASH_SOURCE[0]}")/../redis-server.sh"
for i in 1 2 3; do
  for b in before after; do
    bin=$before; [ $b = after ] && bin=$after
    "$bin" bench --url "$url" --keys 10000 --workers 64 --hold-ms 0 --strategy pubsub \
      --duration 6s --json 2>/dev/null | sed "s/^{/{\"build\":\"$b\",/"
  done
done
