#!/usr/bin/env bash
# Target 4 of issue 23 (the client's own CPU per uncontended acquisition):
# the build before the client-side work (fb9c980) against the build after
# it, alternating, three rounds, each round running the bare lock, the
# fenced floor and relaylock (10,000 keys, 4 processes x 64 workers, hold 0,
# --no-rtt, 6 s), each bench with a redis-server of its own as
# docs/results/fleet/ab/run.sh runs them. (On one shared server started
# beside the bench, the bare lock's client CPU measured 3-4 us more, and
# relaylock's ratio to it 1.35-1.59x instead of about 1.7x.) Build the two binaries first:
#
#   git worktree add /tmp/before fb9c980 && (cd /tmp/before && CARGO_TARGET_DIR=/work/main/target cargo build --release -p relaylock-cli)
#   cp target/release/relaylock /tmp/relaylock-before     # right after that build
#   cargo build --release -p relaylock-cli && cp target/release/relaylock /tmp/relaylock-after
#   docs/results/fleet/client/run.sh && python3 docs/results/fleet/client/summary.py
#
# Then the same for 256 keys (hold 1 ms, the bare lock beside relaylock, two
# rounds). Writes docs/results/fleet/client/{before,after}-<round>.jsonl and
# keys256-{before,after}-<round>.jsonl.
set -euo pipefail
cd "$(dirname "$0")"
for round in 1 2 3; do
  for b in before after; do
    /tmp/relaylock-$b bench --keys 10000 --workers 64 --processes 4 \
      --hold-ms 0 --no-rtt --strategy bare:10 --strategy floor:10 --strategy pubsub --duration 6s \
      --json 2>/dev/null > $b-$round.jsonl
  done
done
for round in 1 2; do
  for b in before after; do
    /tmp/relaylock-$b bench --keys 256 --workers 64 --processes 4 \
      --hold-ms 1 --no-rtt --strategy bare:10 --strategy pubsub --duration 6s \
      --json 2>/dev/null > keys256-$b-$round.jsonl
  done
done
