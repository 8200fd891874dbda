#!/usr/bin/env bash
# Issue 23's fleet scenarios on the 16-core device machine, protocol 2 (96a3fbe,
# the commit before protocol 3) against protocol 3 (this build), two rounds in
# the order p2 p3 p3 p2. As ../shared/tools/scale/run.sh runs them: one
# redis-server 7.0.15 pinned to core 0, the bench's processes on cores 1-15,
# `--url`, `--no-rtt`, each bench with bare:10 beside relaylock (ratios within
# one run). Scenarios: the issue's table (10,000 keys x 8 processes, 256 keys x
# 12 processes, one key x 1/4/12 processes) and its targets' (10,000 keys and
# 256 keys x 4 processes; floor:10 beside them on protocol 3, which protocol 2's
# bench lacks). Staged here, then run there:
#
#   bash ../shared/tools/scale/prepare.sh          # target/scale: this build, redis-server, libs
#   git worktree add /tmp/p2wt 96a3fbe && (cd /tmp/p2wt && CARGO_TARGET_DIR=$PWD/target/p2 cargo build --release -p relaylock-cli)
#   strip -o target/scale/bin/relaylock-p2 target/p2/release/relaylock
#   device run, carry target/scale: bash docs/results/fleet/scale/run.sh
#
# Writes $OUT/{p2,p3}-{1,2}.jsonl (one JSON line per strategy run) and
# $OUT/machine.txt; docs/results/fleet/scale/ holds them as they came back.
set -u
. docs/results/fleet/scale/server.sh   # PATH, $out, $D, pin(), redis-server on $port
run() { # build round
  local bin=relaylock; [ "$1" = p2 ] && bin=relaylock-p2
  local floor=(); [ "$1" = p3 ] && floor=(--strategy floor:10)
  local f="$out/$1-$2.jsonl"
  b() { redis-cli -p $port flushall >/dev/null; echo "+ $1 round $2: $*" >&2
    pin 1-$last "$bin" bench --url redis://127.0.0.1:$port --no-rtt --json --duration "$D" \
      --workers 64 "${@:3}" 2>>"$out/stderr.txt" >> "$f"; }
  b "$1" "$2" --keys 10000 --processes 4 --hold-ms 0 --strategy pubsub --strategy bare:10 "${floor[@]}"
  b "$1" "$2" --keys 10000 --processes 8 --hold-ms 0 --strategy pubsub --strategy bare:10
  b "$1" "$2" --keys 256 --processes 4 --hold-ms 1 --strategy pubsub --strategy bare:10
  b "$1" "$2" --keys 256 --processes 12 --hold-ms 1 --strategy pubsub --strategy bare:10
  b "$1" "$2" --keys 1 --sweep processes=1,4,12 --hold-ms 1 --strategy pubsub --strategy bare:10
  wc -l "$f" >&2
}
run p2 1; run p3 1; run p3 2; run p2 2
redis-cli -p $port info commandstats | head -20
kill "$(cat "$dir/pid")"
