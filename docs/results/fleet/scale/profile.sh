#!/usr/bin/env bash
# Where the client's CPU goes on the 16-core device machine (issue 23, target 4):
# the uncontended fleet scenario (10,000 keys, 4 processes x 64 workers, hold 0,
# --no-rtt) for relaylock, the fenced floor and the bare lock, each with
# `perf record -a` (999 Hz, no call graphs: the staged binaries are stripped)
# for 3 s in the middle of its run, and the context switches of the whole
# machine over the same 3 s (/proc/stat). redis-server pinned to core 0 as in
# run.sh. Needs target/scale from ../shared/tools/scale/prepare.sh and perf
# with its libraries in target/scale/perf (`ldd /usr/bin/perf`). Writes
# $OUT/perf-{pubsub,floor,bare}.data (symbols: `perf buildid-cache -a
# target/release/relaylock` here, then `perf report -i ...`), $OUT/bench.jsonl and
# $OUT/report.txt (the kernel's symbols, resolved there).
set -u
export PATH=$PWD/target/scale/bin:$PATH LD_LIBRARY_PATH=$PWD/target/scale/lib
P() { LD_LIBRARY_PATH=$PWD/target/scale/perf target/scale/perf/perf "$@"; }
out=${OUT:-/tmp/out}; mkdir -p "$out"; rep=$out/report.txt
port=6390; dir=$(mktemp -d); last=$(( $(nproc) - 1 ))
taskset -c 0 redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/pid" --logfile "$dir/log"
sleep 0.5; redis-cli -p $port ping
ctxt() { awk '/^ctxt/ {print $2}' /proc/stat; }
for s in pubsub floor:10 bare:10; do
  n=${s%%:*}
  redis-cli -p $port flushall >/dev/null
  taskset -c 1-$last relaylock bench --url redis://127.0.0.1:$port --no-rtt --json --duration 9s \
    --workers 64 --processes 4 --keys 10000 --hold-ms 0 --strategy "$s" 2>/dev/null >> "$out/bench.jsonl" &
  sleep 3
  c0=$(ctxt); P record -a -F 999 -o "$out/perf-$n.data" -- sleep 3 2>>"$rep"; c1=$(ctxt)
  echo "== $s: context switches in the 3 s window: $((c1 - c0))" >> "$rep"
  wait
  tail -1 "$out/bench.jsonl" >> "$rep"
  { echo "== $s: by command and library"
    P report -i "$out/perf-$n.data" --stdio --sort comm,dso 2>/dev/null | grep -v '^#' | grep . | head -25
    echo "== $s: the kernel's symbols in the bench's processes"
    P report -i "$out/perf-$n.data" --stdio --comm tokio-rt-worker --dsos '[kernel.kallsyms]' --sort sym 2>/dev/null \
      | grep -v '^#' | grep . | head -30
  } >> "$rep"
done
kill "$(cat "$dir/pid")"
cat "$rep"
