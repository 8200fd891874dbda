#!/usr/bin/env bash
# Protocol 4's targets (docs/benchmarks.md, "Targets"), for one build: three
# rounds of the scenarios, each bench with a redis-server of its own and the
# bare lock beside relaylock in every run (`--no-rtt`: ratios within one
# run), then the per-entity memory run once. OUT names the folder the rows
# go to (default p4: this build; p3 for protocol 3's build, the "before").
#
#   cargo build --release -p relaylock-cli && docs/results/targets/run.sh
#   R=/path/to/protocol-3/relaylock OUT=p3 docs/results/targets/run.sh
#   python3 docs/results/targets/now.py
set -euo pipefail
cd "$(dirname "$0")"
R=${R:-../../../target/release/relaylock}
out=${OUT:-p4}
mkdir -p "$out"
git -C . rev-parse --short HEAD > "$out/commit.txt"
for round in ${ROUNDS:-1 2 3}; do
  $R bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt --strategy pubsub \
    --strategy bare:10 --duration 8s --json 2>/dev/null > "$out/uncontended-$round.jsonl"
  $R bench --keys 256 --workers 64 --processes 4 --hold-ms 1 --no-rtt --strategy pubsub \
    --strategy bare:10 --duration 8s --json 2>/dev/null > "$out/keys256-$round.jsonl"
  $R bench --sweep processes=4,12 --workers 64 --keys 1 --hold-ms 1 --no-rtt --strategy pubsub \
    --strategy bare:10 --duration 20s --json 2>/dev/null > "$out/processes-$round.jsonl"
done
# A per-entity workload: every acquisition a key of its own (nearly), what
# the released keys leave behind at the end of the run.
$R bench --keys 1000000 --workers 64 --processes 2 --hold-ms 0 --no-rtt --strategy pubsub \
  --strategy bare:10 --duration 7s --json 2>/dev/null > "$out/entities.jsonl"
