#!/usr/bin/env bash
# Target 4 (the client's CPU per uncontended acquisition) after the client-side
# work of this stop, on the 2-core machine: the build before (2a59ea6) against
# the build after, alternating, five rounds; each bench starts a redis-server
# of its own. Uncontended: 10,000 keys, 4 x 64 workers, hold 0, the bare lock
# and the fenced floor beside relaylock; target 2 (256 keys, 4 x 64, hold 1 ms)
# beside, to show it did not move. 6 s per strategy. Build the binaries first:
#
#   git worktree add /tmp/before 2a59ea6 && (cd /tmp/before && CARGO_TARGET_DIR=/work/main/target/before cargo build --release -p relaylock-cli)
#   cp target/before/release/relaylock /tmp/relaylock-before
#   cargo build --release -p relaylock-cli && cp target/release/relaylock /tmp/relaylock-after
#   docs/results/fleet/client-cpu/run.sh && python3 docs/results/fleet/client-cpu/summary.py
#
# Writes docs/results/fleet/client-cpu/two-core/{uncontended,keys256}-{before,after}-<round>.jsonl.
set -euo pipefail
cd "$(dirname "$0")"; mkdir -p two-core
for round in 1 2 3 4 5; do
  order="before after"; [ $((round % 2)) = 0 ] && order="after before"
  for b in $order; do
    /tmp/relaylock-$b bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt \
      --strategy bare:10 --strategy floor:10 --strategy pubsub --duration 6s --json 2>/dev/null \
      > two-core/uncontended-$b-$round.jsonl
    /tmp/relaylock-$b bench --keys 256 --workers 64 --processes 4 --hold-ms 1 --no-rtt \
      --strategy bare:10 --strategy pubsub --duration 6s --json 2>/dev/null \
      > two-core/keys256-$b-$round.jsonl
  done
done
