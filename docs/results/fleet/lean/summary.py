#!/usr/bin/env python3
"""Targets 1, 2 and 4 of issue 23 from scale.sh's runs on the 16-core
machine: each ratio within one bench run. first/: after = 17ab682 (integer
replies, lean arguments); final/: after = efe9f14 (and no closures);
before = f9682a5 in both.
   python3 docs/results/fleet/lean/summary.py"""
import json, os, statistics, sys

here = os.path.dirname(os.path.abspath(__file__))

def runs(d, name):
    rows = [json.loads(l) for l in open(os.path.join(here, d, name))]
    out = {}
    for r in rows:
        out.setdefault((r['keys'], r['processes'], r['hold_ms']), {})[r['strategy']] = r
    return out

for n, d in enumerate(('first', 'final')):
    if n:
        print()
    print('| build, round | target 1: Redis CPU µs/acq (× bare) | target 4: client CPU µs/acq (× bare) | '
          'target 2: Redis CPU µs/acq (× bare) | target 2: acq/s (× bare) | target 2: wait p99 ms (× bare) | '
          'target 2: acquire calls/acq | 256 keys × 12: acq/s (× bare) | floor, target 1: Redis (× bare) / client (× bare) |')
    print('|---|---|---|---|---|---|---|---|---|')
    for b, rd in [('before', 1), ('after', 1), ('after', 2), ('before', 2)]:
        r = runs(d, f'{b}-{rd}.jsonl')
        u, k, k12 = r[(10000, 4, 0.0)], r[(256, 4, 1.0)], r[(256, 12, 1.0)]
        p, x, f = u['pubsub'], u['bare:10'], u['floor:10']
        rc = lambda s, c: s[c]
        def ratio(a, bb, c, fmt='{:.1f}'):
            return f"{fmt.format(a[c])} ({a[c] / bb[c]:.2f}×)"
        print(f"| {d}: {b} {rd} | {ratio(p, x, 'redis_cpu_us_per_acq')} | {ratio(p, x, 'client_cpu_us_per_acq')} | "
              f"{ratio(k['pubsub'], k['bare:10'], 'redis_cpu_us_per_acq')} | "
              f"{ratio(k['pubsub'], k['bare:10'], 'acq_per_s', '{:,.0f}')} | "
              f"{ratio(k['pubsub'], k['bare:10'], 'wait_p99_ms')} | {k['pubsub']['attempts_per_acq']:.3f} | "
              f"{ratio(k12['pubsub'], k12['bare:10'], 'acq_per_s', '{:,.0f}')} | "
              f"{f['redis_cpu_us_per_acq'] / x['redis_cpu_us_per_acq']:.2f}× / {f['client_cpu_us_per_acq'] / x['client_cpu_us_per_acq']:.2f}× |")
