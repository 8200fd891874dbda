#!/usr/bin/env bash
# Integer replies and lean arguments (commit 17ab682) on the 16-core device
# machine: the build before (f9682a5) against the build after, rounds in the
# order before, after, after, before; as docs/results/fleet/scale/run.sh runs
# them (redis-server 7.0.15 pinned to core 0, the bench on cores 1-15,
# `--url`, `--no-rtt`, 6 s per strategy), each bench with the bare lock and the
# fenced floor beside relaylock. Scenarios: target 1 (10,000 keys, 4 x 64,
# hold 0), target 2 (256 keys, 4 x 64, hold 1 ms) and the issue's 256 keys x 12
# processes. Staged here, then run there:
#
#   bash ../shared/tools/scale/prepare.sh        # target/scale: this build (after)
#   git worktree add /tmp/before f9682a5 && (cd /tmp/before && CARGO_TARGET_DIR=/work/main/target/before cargo build --release -p relaylock-cli)
#   strip -o target/scale/bin/relaylock-before target/before/release/relaylock
#   device run, carry target/scale: bash docs/results/fleet/lean/scale.sh
#
# Writes $OUT/{before,after}-{1,2}.jsonl and $OUT/machine.txt.
set -u
. docs/results/fleet/scale/server.sh   # PATH, $out, $D, pin(), bench_round, redis-server on $port
run() { # build round
  bench_round "$1" "$2" --keys 256 --processes 4 --hold-ms 1 --strategy pubsub --strategy bare:10 --strategy floor:10
  bench_round "$1" "$2" --keys 10000 --processes 4 --hold-ms 0 --strategy pubsub --strategy bare:10 --strategy floor:10
  bench_round "$1" "$2" --keys 256 --processes 12 --hold-ms 1 --strategy pubsub --strategy bare:10
  wc -l "$out/$1-$2.jsonl" >&2
}
run before 1; run after 1; run after 2; run before 2
kill "$(cat "$dir/pid")"
