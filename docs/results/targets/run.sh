#!/usr/bin/env bash
# Issue 23's targets on the current build, all in one go: three rounds of the
# fleet scenarios (each bench with a redis-server of its own, the bare lock
# beside relaylock in every run, and the fenced floor beside them in targets
# 1, 2 and 4), then the targets already met (target 5). Ratios are within one
# run; the table (now.py) gives every round and judges the median. ROUNDS
# names the rounds (default 1 2 3); KEPT=0 skips target 5.
#
#   cargo build --release -p relaylock-cli && docs/results/targets/run.sh
#   ROUNDS="4 5 6" KEPT=0 docs/results/targets/run.sh     (three more rounds, later)
#   python3 docs/results/targets/now.py
set -euo pipefail
cd "$(dirname "$0")"
R=${R:-../../../target/release/relaylock}
git -C . rev-parse --short HEAD >> commit.txt
for round in ${ROUNDS:-1 2 3}; do
  $R bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt --strategy pubsub \
    --strategy bare:10 --strategy floor:10 --duration 8s --json 2>/dev/null > uncontended-$round.jsonl
  $R bench --keys 256 --workers 64 --processes 4 --hold-ms 1 --no-rtt --strategy pubsub \
    --strategy bare:10 --strategy floor:10 --duration 8s --json 2>/dev/null > keys256-$round.jsonl
  $R bench --sweep processes=1,4,12 --workers 64 --keys 1 --hold-ms 1 --no-rtt --strategy pubsub \
    --strategy bare:10 --duration 6s --json 2>/dev/null > processes-$round.jsonl
done
[ "${KEPT:-1}" = 0 ] && exit 0
$R bench --sweep workers=8,64,256,1024 --strategy pubsub --duration 6s --json 2>/dev/null > kept-sweep.jsonl
$R bench --processes 4 --workers 64 --strategy pubsub --duration 8s --json 2>/dev/null > kept-processes.jsonl
