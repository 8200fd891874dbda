#!/usr/bin/env bash
# Target 5 of issue 23 on protocol 3: the targets already met before (the
# "Targets" table of docs/benchmarks.md, lean-protocol issue) measured again:
# one process on one key at 8/64/256/1024 workers (with the PING round trip,
# for the hand-over within one process), and 4 processes x 64 workers.
#
#   cargo build --release -p relaylock-cli && docs/results/fleet/kept/run.sh
#   python3 docs/results/fleet/kept/kept.py
set -euo pipefail
cd "$(dirname "$0")"
R=${R:-../../../../target/release/relaylock}
$R bench --sweep workers=8,64,256,1024 --strategy pubsub --duration 6s --json 2>/dev/null > sweep.jsonl
$R bench --processes 4 --workers 64 --strategy pubsub --duration 8s --json 2>/dev/null > processes.jsonl
