#!/usr/bin/env bash
# Who makes the futex calls of the bench's workers, per acquisition: `perf
# record` of every futex syscall with its user stack (DWARF), during the
# uncontended scenario (10,000 keys, 2 x 64 workers, hold 0, 3 s), then
# futex_callers.py: malloc and free (glibc's arena locks) by their caller,
# tokio's parking and wake-ups.
#   docs/results/fleet/client-cpu/futex-callers.sh BIN STRATEGY > OUT.txt
# e.g. the third pass (docs/benchmarks.md, "Client CPU, third pass"):
#   for s in floor:10 pubsub; do futex-callers.sh /tmp/relaylock-base $s; done > third/futex-base.txt
#   futex-callers.sh /tmp/relaylock-recycle pubsub > third/futex-recycle.txt
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?binary}
strategy=${2:?strategy}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
perf record -q -e syscalls:sys_enter_futex --call-graph dwarf,16384 -o "$tmp/perf.data" -- \
  "$bin" bench --keys 10000 --workers 64 --processes 2 --hold-ms 0 --no-rtt --strategy "$strategy" \
  --duration 3s --json > "$tmp/bench.jsonl" 2>/dev/null
perf script -i "$tmp/perf.data" 2>/dev/null > "$tmp/stacks.txt"
echo "--- $strategy ($bin)"
python3 "$here/futex_callers.py" "$tmp/stacks.txt" "$tmp/bench.jsonl"
