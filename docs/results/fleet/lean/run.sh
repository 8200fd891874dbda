#!/usr/bin/env bash
# Integer replies and lean arguments on this 2-core machine: the build before
# (f9682a5) against the build after (efe9f14), alternating, three rounds;
# each bench starts a redis-server of its own, as docs/results/fleet/ab/run.sh
# runs them: target 1 and 4 (10,000 keys, 4 x 64, hold 0; the bare lock and the
# fenced floor beside relaylock) and target 2 (256 keys, 4 x 64, hold 1 ms;
# the bare lock beside), 6 s per strategy. Build the two binaries first:
#
#   git worktree add /tmp/before f9682a5 && (cd /tmp/before && CARGO_TARGET_DIR=/work/main/target/before cargo build --release -p relaylock-cli)
#   cp target/before/release/relaylock /tmp/relaylock-before
#   cargo build --release -p relaylock-cli && cp target/release/relaylock /tmp/relaylock-after
#   docs/results/fleet/lean/run.sh && python3 docs/results/fleet/lean/run_summary.py
#
# Writes docs/results/fleet/lean/two-core/{uncontended,keys256}-{before,after}-<round>.jsonl
# (ROUNDS=n and OUT=<folder> run it for another comparison: client-cpu/run.sh).
set -euo pipefail
cd "$(dirname "$0")"; out=${OUT:-two-core}; mkdir -p "$out"
for round in $(seq "${ROUNDS:-3}"); do
  order="before after"; [ $((round % 2)) = 0 ] && order="after before"
  for b in $order; do
    /tmp/relaylock-$b bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt \
      --strategy bare:10 --strategy floor:10 --strategy pubsub --duration 6s --json 2>/dev/null \
      > "$out/uncontended-$b-$round.jsonl"
    /tmp/relaylock-$b bench --keys 256 --workers 64 --processes 4 --hold-ms 1 --no-rtt \
      --strategy bare:10 --strategy pubsub --duration 6s --json 2>/dev/null \
      > "$out/keys256-$b-$round.jsonl"
  done
done
