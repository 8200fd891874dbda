#!/usr/bin/env bash
# Target 2 alone (256 keys, 4 x 64, hold 1 ms) on the 16-core device machine,
# the build before (f9682a5) and after (17ab682) alternating over five rounds
# (before first in odd rounds, after first in even ones), each bench with the
# bare lock beside relaylock; otherwise as scale.sh (staged the same way).
#   device run, carry target/scale: bash docs/results/fleet/lean/t2.sh
# Writes $OUT/t2-{before,after}.jsonl.
set -u
export PATH=$PWD/target/scale/bin:$PATH LD_LIBRARY_PATH=$PWD/target/scale/lib
out=${OUT:-/tmp/out}; mkdir -p "$out"; D=${D:-6s}
port=6390; dir=$(mktemp -d); last=$(( $(nproc) - 1 ))
pin() { if command -v taskset >/dev/null; then taskset -c "$@"; else shift; "$@"; fi; }
pin 0 redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/pid" --logfile "$dir/log"
sleep 0.5; redis-cli -p $port ping
b() { local bin=relaylock; [ "$1" = before ] && bin=relaylock-before
  redis-cli -p $port flushall >/dev/null; echo "+ $1 round $2" >&2
  pin 1-$last "$bin" bench --url redis://127.0.0.1:$port --no-rtt --json --duration "$D" \
    --workers 64 --keys 256 --processes 4 --hold-ms 1 --strategy pubsub --strategy bare:10 \
    2>>"$out/stderr.txt" | sed "s/^{/{\"round\":$2,/" >> "$out/t2-$1.jsonl"; }
for round in 1 2 3 4 5; do
  if [ $((round % 2)) = 1 ]; then b before $round; b after $round; else b after $round; b before $round; fi
done
kill "$(cat "$dir/pid")"
