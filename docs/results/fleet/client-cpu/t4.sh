#!/usr/bin/env bash
# Target 4 alone, more rounds: the bare lock and relaylock (no floor, no
# target 2), 10,000 keys, 4 x 64 workers, hold 0, 6 s each, eight rounds of
# the builds before and after alternating (binaries as run.sh says).
#   docs/results/fleet/client-cpu/t4.sh && python3 docs/results/fleet/client-cpu/t4_summary.py
# OUT names the folder (default t4), BEFORE and AFTER the two binaries
# (default /tmp/relaylock-before and /tmp/relaylock-after); the second pass:
#   OUT=t4-second BEFORE=/tmp/relaylock-09a4a10 AFTER=/tmp/relaylock-second \
#     docs/results/fleet/client-cpu/t4.sh && python3 docs/results/fleet/client-cpu/t4_summary.py t4-second
set -euo pipefail
cd "$(dirname "$0")"; out=${OUT:-t4}; mkdir -p "$out"
for round in 1 2 3 4 5 6 7 8; do
  order="before after"; [ $((round % 2)) = 0 ] && order="after before"
  for b in $order; do
    bin=${BEFORE:-/tmp/relaylock-before}; [ $b = after ] && bin=${AFTER:-/tmp/relaylock-after}
    "$bin" bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt \
      --strategy bare:10 --strategy pubsub --duration 6s --json 2>/dev/null > "$out/$b-$round.jsonl"
  done
done
