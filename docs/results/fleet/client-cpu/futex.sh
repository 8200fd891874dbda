#!/usr/bin/env bash
# futex calls and context switches per acquisition, the fenced floor against
# relaylock (10,000 keys, 2 x 64 workers, hold 0, 4 s): the whole bench's
# process tree, its redis-server included (the same load in both).
#   docs/results/fleet/client-cpu/futex.sh /tmp/relaylock-after > docs/results/fleet/client-cpu/futex.txt
set -euo pipefail
bin=${1:-target/release/relaylock}
for s in floor:10 pubsub; do
  perf stat -x, -e syscalls:sys_enter_futex,context-switches -o /tmp/futex-${s%%:*}.csv -- "$bin" bench \
    --keys 10000 --workers 64 --processes 2 --hold-ms 0 --no-rtt --strategy $s --duration 4s --json \
    2>/dev/null > /tmp/futex-${s%%:*}.jsonl
  python3 - "$s" /tmp/futex-${s%%:*} <<'PY'
import json, sys
s, base = sys.argv[1:3]
acq = json.loads(open(base + '.jsonl').readline())['acquisitions']
for line in open(base + '.csv'):
    f = line.strip().split(',')
    if len(f) > 2 and f[0].replace('.', '').isdigit():
        print(f'{s:9} {f[2]:28} {int(float(f[0])) / acq:.3f} per acquisition')
PY
done
