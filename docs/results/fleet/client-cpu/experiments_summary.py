#!/usr/bin/env python3
"""experiments.sh's runs: relaylock's client CPU per acquisition over bare:10's
   in each run; per build the median, and what leaving the part out saved
   against the base build (medians of the µs, and of the ratio).
   python3 docs/results/fleet/client-cpu/experiments_summary.py"""
import json, os, statistics

d = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'experiments')
runs = {}
for f in os.listdir(d):
    b, rd = f.rsplit('-', 1)
    r = {x['strategy']: x for x in map(json.loads, open(os.path.join(d, f)))}
    p, x = r['pubsub']['client_cpu_us_per_acq'], r['bare:10']['client_cpu_us_per_acq']
    runs.setdefault(b, []).append((p, x, p / x))
base = runs['base']
med = lambda rows, i: statistics.median(r[i] for r in rows)
print('| build | runs | relaylock client µs/acq (median) | bare:10 µs/acq (median) | ratio: median (range) | saved against base |')
print('|---|---:|---:|---:|---|---|')
for b in ('base', 'nometrics', 'nowatch', 'noclose'):
    rows = runs[b]
    q = [r[2] for r in rows]
    saved = '' if b == 'base' else f"{med(base, 0) - med(rows, 0):.2f} µs, {med(base, 2) - med(rows, 2):.3f} in the ratio"
    print(f"| {b} | {len(rows)} | {med(rows, 0):.2f} | {med(rows, 1):.2f} | {statistics.median(q):.3f}× "
          f"({min(q):.3f}–{max(q):.3f}×) | {saved} |")
