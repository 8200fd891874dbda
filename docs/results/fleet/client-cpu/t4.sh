#!/usr/bin/env bash
# Target 4 alone, more rounds: the bare lock and relaylock (no floor, no
# target 2), 10,000 keys, 4 x 64 workers, hold 0, 6 s each, eight rounds of
# the builds before and after alternating (binaries as run.sh says).
#   docs/results/fleet/client-cpu/t4.sh && python3 docs/results/fleet/client-cpu/t4_summary.py
set -euo pipefail
cd "$(dirname "$0")"; mkdir -p t4
for round in 1 2 3 4 5 6 7 8; do
  order="before after"; [ $((round % 2)) = 0 ] && order="after before"
  for b in $order; do
    /tmp/relaylock-$b bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt \
      --strategy bare:10 --strategy pubsub --duration 6s --json 2>/dev/null > t4/$b-$round.jsonl
  done
done
