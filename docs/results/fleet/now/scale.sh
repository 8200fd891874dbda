#!/usr/bin/env bash
# Issue 23's client-side targets on the 16-core device machine, for the next
# session lent it: the last build measured there (efe9f14, "Integer replies
# and lean arguments") against the current one, rounds in the order before,
# after, after, before, as docs/results/fleet/scale/run.sh runs them
# (redis-server 7.0.15 pinned to core 0, the bench on the other cores,
# `--url`, `--no-rtt`, $D per strategy), each bench with the bare lock beside
# relaylock and, for targets 1, 2 and 4, the fenced floor. Scenarios: target 1
# and 4 (10,000 keys, 4 x 64, hold 0), target 2 (256 keys, 4 x 64, hold 1 ms),
# target 3 (one key, 64 per process, 4 and 12 processes). The three client
# passes (docs/benchmarks.md 6a) were measured only on 2 cores, where their
# shared-state changes cannot show. Staged here, then run there:
#
#   bash ../shared/tools/scale/prepare.sh        # target/scale: this build (after)
#   git worktree add /tmp/before efe9f14 && (cd /tmp/before && CARGO_TARGET_DIR=/work/main/target/before cargo build --release -p relaylock-cli)
#   strip -o target/scale/bin/relaylock-before target/before/release/relaylock
#   device run, carry target/scale: bash docs/results/fleet/now/scale.sh
#   then: $OUT/* -> docs/results/fleet/now/scale/, python3 docs/results/fleet/now/scale_summary.py
#
# Writes $OUT/{before,after}-{1,2}.jsonl and $OUT/machine.txt.
set -u
. docs/results/fleet/scale/server.sh   # PATH, $out, $D, pin(), bench_round, redis-server on $port
run() { # build round
  bench_round "$1" "$2" --keys 10000 --processes 4 --hold-ms 0 --strategy pubsub --strategy bare:10 --strategy floor:10
  bench_round "$1" "$2" --keys 256 --processes 4 --hold-ms 1 --strategy pubsub --strategy bare:10 --strategy floor:10
  bench_round "$1" "$2" --keys 1 --sweep processes=4,12 --hold-ms 1 --strategy pubsub --strategy bare:10
  wc -l "$out/$1-$2.jsonl" >&2
}
run before 1; run after 1; run after 2; run before 2
kill "$(cat "$dir/pid")"
