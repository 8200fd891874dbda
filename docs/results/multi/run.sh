#!/usr/bin/env bash
# The multi-key lock's figures in docs/benchmarks.md ("Multi-key locks"),
# from the repository root:
#   RELAYLOCK_BIN=<release build of relaylock-cli> bash docs/results/multi/run.sh
# then RELAYLOCK_BIN=... docs/results/render.sh. Each bench starts a
# redis-server of its own; every per-acquisition figure of a
# --keys-per-lock run is per key acquired.
set -euo pipefail
R=${RELAYLOCK_BIN:-target/release/relaylock}
D=docs/results/multi
# Target 1: sets of 10,000 keys, one after the other (one worker, hold 0):
# a set's take and release is 10,000 / (keys acquired per second).
$R bench --keys 10000 --keys-per-lock 10000 --workers 1 --processes 1 --hold-ms 0 \
  --duration 10s --strategy pubsub --no-rtt --json > $D/ten-thousand.jsonl
# Target 2: 8 processes x 64 tasks, each set a random 2-8 of 32 keys in a
# random order, a quarter of the acquisitions single-key locks of the same
# keys, 60 s; against N single locks one by one (Redisson's way, each wait
# 10 ms, all released and retried on a timeout) and the bare all-or-nothing
# script polled every 10 ms. Then single-key locks alone, same shape.
$R bench --keys 32 --keys-per-lock 2-8 --single-share 0.25 --workers 64 --processes 8 \
  --hold-ms 1 --duration 60s --strategy pubsub --strategy onebyone:10 --strategy bare:10 \
  --no-rtt --json > $D/sets.jsonl
$R bench --keys 32 --workers 64 --processes 8 --hold-ms 1 --duration 60s \
  --strategy pubsub --no-rtt --json > $D/single.jsonl
