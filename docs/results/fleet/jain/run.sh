#!/usr/bin/env bash
# Fairness at 12 processes x 64 workers on one key, hold 1 ms, over 20 s
# (the 6 s sweep gives each of the 768 workers about 3 acquisitions, too few
# for a stable Jain index), protocol 2 and protocol 3 alternating, twice.
# The binaries as docs/results/fleet/ab/run.sh builds them.
#
#   docs/results/fleet/jain/run.sh
set -euo pipefail
cd "$(dirname "$0")"
for i in 1 2; do
  for p in p2 p3; do
    /tmp/relaylock-$p bench --processes 12 --workers 64 --keys 1 --hold-ms 1 --no-rtt \
      --strategy pubsub --duration 20s --json 2>/dev/null > $p-$i.jsonl
  done
done
