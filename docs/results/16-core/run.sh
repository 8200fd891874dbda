#!/usr/bin/env bash
# The 16-core runs of docs/benchmarks.md: needs a machine with 16 cores (or
# more), taskset, redis-server 7.0.15 and redis-cli on PATH, and the release
# binary of relaylock at target/scale/bin/relaylock (server.sh puts
# target/scale/bin first on PATH). From the repository root:
#
#   mkdir -p target/scale/bin && cp target/release/relaylock target/scale/bin/
#   OUT=/tmp/out bash docs/results/16-core/run.sh
#   cp /tmp/out/after-*.jsonl ...: rename after-N.jsonl to round-N.jsonl here,
#   and /tmp/out/machine.txt; then python3 docs/results/16-core/summary.py
#
# Two rounds of three scenarios, each with the bare lock and the fenced floor
# beside relaylock, 64 workers per process, redis-server pinned to core 0,
# the bench on the other cores, --no-rtt, 6 s per strategy.
set -u
. docs/results/16-core/server.sh   # PATH, $out, $D, pin(), bench_round, redis-server on $port
for round in 1 2; do
  bench_round after "$round" --keys 256 --processes 4 --hold-ms 1 --strategy pubsub --strategy bare:10 --strategy floor:10
  bench_round after "$round" --keys 10000 --processes 4 --hold-ms 0 --strategy pubsub --strategy bare:10 --strategy floor:10
  bench_round after "$round" --keys 256 --processes 12 --hold-ms 1 --strategy pubsub --strategy bare:10
done
kill "$(cat "$dir/pid")"
