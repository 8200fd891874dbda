#!/usr/bin/env bash
# What the bench's round-trip probe (a PING every 5 ms) adds to relaylock's
# Redis CPU per acquisition in run.sh's scenario (1 key, 256 workers, hold
# 1 ms, 6 s, lease 10 s): with and without --no-rtt, alternating, twice, on
# one redis-server. One JSON line per run, with "probe" prepended.
#
#   docs/results/other-locks/probe.sh > docs/results/other-locks/probe.jsonl
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
bin=${RELAYLOCK:-$root/target/release/relaylock}
. "$(dirname "${BASH_SOURCE[0]}")/../redis-server.sh"
for i in 1 2; do
  for probe in on off; do
    flag=(); [ $probe = off ] && flag=(--no-rtt)
    "$bin" bench --url "$url" --keys 1 --workers 256 --hold-ms 1 --strategy pubsub \
      --duration 6s --lease 10s "${flag[@]}" --json 2>/dev/null | sed "s/^{/{\"probe\":\"$probe\",/"
  done
done
