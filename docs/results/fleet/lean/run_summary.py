#!/usr/bin/env python3
"""The 2-core runs of run.sh: targets 1, 2 and 4, each ratio within one run.
   python3 docs/results/fleet/lean/run_summary.py"""
import json, os

d = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'two-core')
def load(name):
    return {r['strategy']: r for r in map(json.loads, open(os.path.join(d, name)))}
print('| build | round | T1 Redis CPU µs/acq (× bare) | T4 client CPU µs/acq (× bare) | floor: Redis / client × bare | '
      'T2 Redis CPU µs/acq (× bare) | T2 acq/s (× bare) | T2 wait p99 ms (× bare) | T2 acquire calls/acq |')
print('|---|---:|---|---|---|---|---|---|---:|')
for b in ('before', 'after'):
    for rd in (1, 2, 3):
        u, k = load(f'uncontended-{b}-{rd}.jsonl'), load(f'keys256-{b}-{rd}.jsonl')
        p, x, f = u['pubsub'], u['bare:10'], u['floor:10']
        kp, kx = k['pubsub'], k['bare:10']
        r = lambda a, c, fmt='{:.1f}', base=None: f"{fmt.format(a[c])} ({a[c] / (base or x)[c]:.2f}×)"
        print(f"| {b} | {rd} | {r(p, 'redis_cpu_us_per_acq')} | {r(p, 'client_cpu_us_per_acq')} | "
              f"{f['redis_cpu_us_per_acq'] / x['redis_cpu_us_per_acq']:.2f}× / {f['client_cpu_us_per_acq'] / x['client_cpu_us_per_acq']:.2f}× | "
              f"{r(kp, 'redis_cpu_us_per_acq', base=kx)} | {r(kp, 'acq_per_s', '{:,.0f}', kx)} | "
              f"{r(kp, 'wait_p99_ms', base=kx)} | {kp['attempts_per_acq']:.3f} |")
