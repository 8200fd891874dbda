#!/usr/bin/env bash
# The floor of a script-based protocol in real traffic: relaylock (pubsub)
# beside `floor:10` (the cheapest lock that keeps relaylock's fencing token:
# one script each way, GET/TIME/SET and GET/SET, no queue, no hand-over, no
# replay record) and the bare lock, in ONE run per scenario, twice.
#
#   cargo build --release -p relaylock-cli && docs/results/fleet/floor/run.sh
set -euo pipefail
cd "$(dirname "$0")"
R=${R:-../../../../target/release/relaylock}
for i in 1 2; do
  $R bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt --strategy pubsub \
    --strategy floor:10 --strategy bare:10 --duration 8s --json 2>/dev/null
done > uncontended.jsonl
for i in 1 2; do
  $R bench --keys 256 --workers 64 --processes 4 --hold-ms 1 --no-rtt --strategy pubsub \
    --strategy floor:10 --strategy bare:10 --duration 8s --json 2>/dev/null
done > keys256.jsonl
