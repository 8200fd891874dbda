#!/usr/bin/env bash
# Target 3's growth from 4 to 12 processes, the build of protocol 3 (13442eb)
# and the current build alternating, two rounds, relaylock alone, one key,
# 64 workers per process, hold 1 ms, 6 s: whether a change moved it or the
# host did (docs/benchmarks.md, "Where issue 23's targets stand").
#   /tmp/relaylock-p3: built from 13442eb as ../../ab/run.sh says
#   /tmp/relaylock-final: cargo build --release -p relaylock-cli (copied)
#   docs/results/fleet/now/growth/run.sh && python3 docs/results/fleet/now/growth/growth.py
set -euo pipefail
cd "$(dirname "$0")"
for r in 1 2; do
  for b in p3 final; do
    /tmp/relaylock-$b bench --sweep processes=4,12 --workers 64 --keys 1 --hold-ms 1 --no-rtt \
      --strategy pubsub --duration 6s --json 2>/dev/null > $b-$r.jsonl
  done
done
