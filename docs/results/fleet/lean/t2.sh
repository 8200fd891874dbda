#!/usr/bin/env bash
# Target 2 alone (256 keys, 4 x 64, hold 1 ms) on the 16-core device machine,
# the build before (f9682a5) and after (17ab682) alternating over five rounds
# (before first in odd rounds, after first in even ones), each bench with the
# bare lock beside relaylock; otherwise as scale.sh (staged the same way).
#   device run, carry target/scale: bash docs/results/fleet/lean/t2.sh
# Writes $OUT/t2-{before,after}.jsonl.
set -u
. docs/results/fleet/scale/server.sh   # PATH, $out, $D, pin(), redis-server on $port
b() { local bin=relaylock; [ "$1" = before ] && bin=relaylock-before
  redis-cli -p $port flushall >/dev/null; echo "+ $1 round $2" >&2
  pin 1-$last "$bin" bench --url redis://127.0.0.1:$port --no-rtt --json --duration "$D" \
    --workers 64 --keys 256 --processes 4 --hold-ms 1 --strategy pubsub --strategy bare:10 \
    2>>"$out/stderr.txt" | sed "s/^{/{\"round\":$2,/" >> "$out/t2-$1.jsonl"; }
for round in 1 2 3 4 5; do
  if [ $((round % 2)) = 1 ]; then b before $round; b after $round; else b after $round; b before $round; fi
done
kill "$(cat "$dir/pid")"
