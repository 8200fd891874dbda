#!/usr/bin/env bash
# Where the client's CPU goes per uncontended acquisition: perf (cpu-clock,
# 2999 Hz, no call graphs) on the bench's workers, the fenced floor (the same
# two EVALSHA through the same fred client) against relaylock, 10,000 keys,
# 2 x 64 workers, hold 0, 4 s each; self time per acquisition by crate.
#   docs/results/fleet/client-cpu/profile.sh /tmp/relaylock-after > docs/results/fleet/client-cpu/profile.txt
set -euo pipefail
bin=${1:-target/release/relaylock}
here=$(cd "$(dirname "$0")" && pwd)
for s in floor:10 pubsub; do
  perf record -q -F 2999 -o /tmp/client-cpu-${s%%:*}.data -- "$bin" bench --keys 10000 --workers 64 \
    --processes 2 --hold-ms 0 --no-rtt --strategy $s --duration 4s --json 2>/dev/null \
    > /tmp/client-cpu-${s%%:*}.jsonl
done
python3 "$here/profile.py" /tmp/client-cpu-floor /tmp/client-cpu-pubsub
