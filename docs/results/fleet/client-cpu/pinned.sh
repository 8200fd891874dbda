#!/usr/bin/env bash
# Target 4 with the cores assigned: where relaylock's extra client CPU comes
# from. One redis-server pinned to core 0 (as the issue's 16-core method pins
# it to one core), the bench's processes (10,000 keys, 4 x 64, hold 0,
# `--url`, `--no-rtt`, 6 s per strategy, relaylock, bare:10 and floor:10):
#   one:  on core 1, one tokio worker thread per process (tokio's default
#         under that affinity): no wake-up crosses threads, Redis has its core;
#   two:  on core 1, TOKIO_WORKER_THREADS=2: wake-ups cross threads, which
#         share one core (no cache line moves between cores);
#   free: on both cores (beside Redis on core 0), two worker threads.
# Three rounds, the modes in turn.
#   docs/results/fleet/client-cpu/pinned.sh && python3 docs/results/fleet/client-cpu/pinned_summary.py
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
R=${R:-$here/../../../../target/release/relaylock}
out=$here/pinned; mkdir -p "$out"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
taskset -c 0 redis-server --port "$port" --save '' --appendonly no --daemonize yes \
  --pidfile "$dir/pid" --logfile "$dir/log"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
sleep 0.5
for round in 1 2 3; do
  for mode in one two free; do
    redis-cli -p "$port" flushall >/dev/null
    case $mode in
      one) run=(taskset -c 1 env) ;;
      two) run=(taskset -c 1 env TOKIO_WORKER_THREADS=2) ;;
      free) run=(env TOKIO_WORKER_THREADS=2) ;;
    esac
    "${run[@]}" "$R" bench --url "redis://127.0.0.1:$port" --no-rtt --json --duration 6s --workers 64 \
      --keys 10000 --processes 4 --hold-ms 0 --strategy pubsub --strategy bare:10 --strategy floor:10 \
      2>/dev/null > "$out/$mode-$round.jsonl"
  done
done
