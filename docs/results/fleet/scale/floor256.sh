#!/usr/bin/env bash
# Target 2 of issue 23 on the 16-core device machine, with the fenced floor
# beside relaylock and the bare lock: 256 keys, 4 processes x 64 workers,
# hold 1 ms, --no-rtt, 6 s per strategy, two rounds; Redis pinned to core 0
# as in run.sh. Whether even a lock with relaylock's fence and no queue
# reaches 0.8x the bare lock's throughput where Redis is the bottleneck.
#   bash ../shared/tools/scale/prepare.sh; device run, carry target/scale:
#   bash docs/results/fleet/scale/floor256.sh   ($OUT/floor256.jsonl)
set -u
export PATH=$PWD/target/scale/bin:$PATH LD_LIBRARY_PATH=$PWD/target/scale/lib
out=${OUT:-/tmp/out}; mkdir -p "$out"
port=6390; dir=$(mktemp -d); last=$(( $(nproc) - 1 ))
taskset -c 0 redis-server --port $port --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
  --daemonize yes --pidfile "$dir/pid" --logfile "$dir/log"
sleep 0.5; redis-cli -p $port ping
for round in 1 2; do
  redis-cli -p $port flushall >/dev/null
  taskset -c 1-$last relaylock bench --url redis://127.0.0.1:$port --no-rtt --json --duration 6s \
    --workers 64 --processes 4 --keys 256 --hold-ms 1 \
    --strategy pubsub --strategy floor:10 --strategy bare:10 2>/dev/null >> "$out/floor256.jsonl"
done
kill "$(cat "$dir/pid")"
cat "$out/floor256.jsonl" | cut -c1-200
