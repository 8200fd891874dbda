#!/usr/bin/env python3
"""Target 2 from t2.sh (five rounds, before and after alternating) on the
16-core machine: each ratio within one bench run, and the medians. first/:
after = 17ab682; final/: after = efe9f14; before = f9682a5 in both.
   python3 docs/results/fleet/lean/t2_summary.py"""
import json, os, statistics, sys

here = os.path.dirname(os.path.abspath(__file__))
for n, d in enumerate(('first', 'final')):
    if n:
        print()
    print('| build | round | acq/s (× bare) | Redis CPU µs/acq (× bare) | wait p99 ms (× bare) | client CPU µs/acq | acquire calls/acq |')
    print('|---|---:|---|---|---|---:|---:|')
    med = {}
    for b in ('before', 'after'):
        rows = [json.loads(l) for l in open(os.path.join(here, d, f't2-{b}.jsonl'))]
        by = {}
        for r in rows:
            by.setdefault(r['round'], {})[r['strategy']] = r
        for rd, s in sorted(by.items()):
            p, x = s['pubsub'], s['bare:10']
            t = p['acq_per_s'] / x['acq_per_s']; c = p['redis_cpu_us_per_acq'] / x['redis_cpu_us_per_acq']
            w = p['wait_p99_ms'] / x['wait_p99_ms']
            for k, v in (('thr', t), ('cpu', c), ('p99', w)):
                med.setdefault((b, k), []).append(v)
            print(f"| {d}: {b} | {rd} | {p['acq_per_s']:,.0f} ({t:.2f}×) | {p['redis_cpu_us_per_acq']:.1f} ({c:.2f}×) | "
                  f"{p['wait_p99_ms']:.1f} ({w:.2f}×) | {p['client_cpu_us_per_acq']:.1f} | {p['attempts_per_acq']:.3f} |")
    print()
    for b in ('before', 'after'):
        print(f"{d}, {b}: median acq/s {statistics.median(med[(b, 'thr')]):.2f}× bare "
              f"(range {min(med[(b, 'thr')]):.2f}–{max(med[(b, 'thr')]):.2f}), Redis CPU "
              f"{statistics.median(med[(b, 'cpu')]):.2f}×, wait p99 {statistics.median(med[(b, 'p99')]):.2f}×  ")
