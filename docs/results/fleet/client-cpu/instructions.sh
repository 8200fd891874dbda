#!/usr/bin/env bash
# Instructions per uncontended lock + release, by part, counted by callgrind:
# deterministic, unlike CPU time on this shared machine. The allocation
# harness (allocs/) runs 1,000 and then 3,000 acquisitions after its warm-up
# round; the difference of the two totals over 2,000 is one acquisition. One
# task on a current-thread runtime, so it counts the work, not the waits and
# wake-ups between threads that the bench's client CPU also pays.
#   redis-server --port 6399 --save "" --daemonize yes
#   BEFORE=/tmp/allocs-before AFTER=/tmp/allocs-after \
#     docs/results/fleet/client-cpu/instructions.sh > docs/results/fleet/client-cpu/instructions.txt
# Each binary: `cargo build --release --manifest-path docs/results/fleet/client-cpu/allocs/Cargo.toml`
# in a worktree of its commit (with this commit's allocs/src/main.rs, which takes the count).
# BEFORE_STRATEGY / AFTER_STRATEGY=floor run that binary's fenced floor instead
# (ALLOCS_STRATEGY, allocs/src/main.rs), and LABELS names the two columns:
#   BEFORE=/tmp/allocs AFTER=/tmp/allocs BEFORE_STRATEGY=floor LABELS="floor:10 relaylock" \
#     docs/results/fleet/client-cpu/instructions.sh > docs/results/fleet/client-cpu/third/instructions-floor.txt
# (ALLOCS_STRATEGY=bare is the bench's bare lock. The floor leaves a tombstone in
# each key for 60 s, which a bare lock's SET NX then finds: run the bare lock
# first, or FLUSHALL the server between: third/instructions-bare.txt.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
url=${URL:-redis://127.0.0.1:6399}
for b in before after; do
  bin=${BEFORE:-}; [ $b = after ] && bin=${AFTER:-}
  strategy=${BEFORE_STRATEGY:-}; [ $b = after ] && strategy=${AFTER_STRATEGY:-}
  for n in 1000 3000; do
    ALLOCS_STRATEGY=$strategy valgrind --tool=callgrind --callgrind-out-file=/tmp/instructions-$b-$n.out "$bin" "$url" $n \
      >/dev/null 2>&1
  done
done
python3 "$here/instructions.py" /tmp/instructions-before /tmp/instructions-after ${LABELS:-}
