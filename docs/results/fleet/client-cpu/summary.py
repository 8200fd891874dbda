#!/usr/bin/env python3
"""The runs of run.sh: target 4 (and 1, 2 beside), each ratio within one run,
   per round and the median of the rounds.
   python3 docs/results/fleet/client-cpu/summary.py [folder, default two-core]"""
import json, os, statistics, sys

d = os.path.join(os.path.dirname(os.path.abspath(__file__)), sys.argv[1] if len(sys.argv) > 1 else 'two-core')
def load(name):
    return {r['strategy']: r for r in map(json.loads, open(os.path.join(d, name)))}
rounds = sorted({int(f.rsplit('-', 1)[1].split('.')[0]) for f in os.listdir(d)})
print('| build | round | T4 client CPU µs/acq (× bare) | floor client × bare | T1 Redis CPU × bare | '
      'T2 Redis CPU × bare | T2 acq/s × bare | T2 wait p99 × bare |')
print('|---|---:|---|---:|---:|---:|---:|---:|')
med = {}
for b in ('before', 'after'):
    cols = []
    for rd in rounds:
        u, k = load(f'uncontended-{b}-{rd}.jsonl'), load(f'keys256-{b}-{rd}.jsonl')
        p, x, f = u['pubsub'], u['bare:10'], u['floor:10']
        kp, kx = k['pubsub'], k['bare:10']
        ratio = lambda a, c, base: a[c] / base[c]
        row = (ratio(p, 'client_cpu_us_per_acq', x), ratio(f, 'client_cpu_us_per_acq', x),
               ratio(p, 'redis_cpu_us_per_acq', x), ratio(kp, 'redis_cpu_us_per_acq', kx),
               ratio(kp, 'acq_per_s', kx), ratio(kp, 'wait_p99_ms', kx))
        cols.append(row)
        print(f"| {b} | {rd} | {p['client_cpu_us_per_acq']:.2f} / {x['client_cpu_us_per_acq']:.2f} "
              f"({row[0]:.3f}×) | {row[1]:.2f}× | {row[2]:.2f}× | {row[3]:.2f}× | {row[4]:.2f}× | {row[5]:.2f}× |")
    med[b] = [statistics.median(c) for c in zip(*cols)]
for b in ('before', 'after'):
    m = med[b]
    print(f"| {b} | median | {m[0]:.3f}× | {m[1]:.2f}× | {m[2]:.2f}× | {m[3]:.2f}× | {m[4]:.2f}× | {m[5]:.2f}× |")
