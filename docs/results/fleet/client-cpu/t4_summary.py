#!/usr/bin/env python3
"""t4.sh's rounds: the client's CPU per acquisition, relaylock over bare:10 in
   each run, and the median per build.
   python3 docs/results/fleet/client-cpu/t4_summary.py [folder, default t4]"""
import json, os, statistics, sys

d = os.path.join(os.path.dirname(os.path.abspath(__file__)), sys.argv[1] if len(sys.argv) > 1 else 't4')
rows = {'before': [], 'after': []}
for f in sorted(os.listdir(d), key=lambda f: (f.split('-')[0], int(f.split('-')[1].split('.')[0]))):
    b, rd = f.split('-')[0], int(f.split('-')[1].split('.')[0])
    r = {x['strategy']: x for x in map(json.loads, open(os.path.join(d, f)))}
    p, x = r['pubsub']['client_cpu_us_per_acq'], r['bare:10']['client_cpu_us_per_acq']
    rows[b].append((rd, p, x, p / x))
print('| build | round | relaylock client µs/acq | bare:10 client µs/acq | ratio |')
print('|---|---:|---:|---:|---:|')
for b in ('before', 'after'):
    for rd, p, x, q in rows[b]:
        print(f'| {b} | {rd} | {p:.2f} | {x:.2f} | {q:.3f}× |')
print()
for b in ('before', 'after'):
    q = [r[3] for r in rows[b]]
    print(f'{b}: median {statistics.median(q):.3f}× (range {min(q):.3f}–{max(q):.3f}×, {len(q)} runs)  ')
