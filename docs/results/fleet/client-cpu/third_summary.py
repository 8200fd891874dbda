#!/usr/bin/env python3
"""The third pass's runs of target 4 (t4.sh, eight alternating rounds each):
   per run, the median ratio of relaylock's client CPU to bare:10's for each
   build, their ranges, and in how many rounds the "after" build measured
   lower than the "before" build next to it.
   python3 docs/results/fleet/client-cpu/third_summary.py"""
import json, os, statistics

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = [
    ('t4-third-1', '155db46', 'metric handles used in place (ae0f2b2)'),
    ('t4-third-2', '155db46', 'metric handles used in place (ae0f2b2)'),
    ('third/t4-recycle', '155db46', '155db46 + recycle.patch (the try\'s box kept per thread)'),
    ('third/t4-shared', 'ae0f2b2', 'ae0f2b2 + shared.patch (no task-tracker tokens, a static client id)'),
]


def ratios(folder, build):
    out = {}
    for f in os.listdir(os.path.join(HERE, folder)):
        b, rd = f.split('-')[0], int(f.split('-')[1].split('.')[0])
        if b != build:
            continue
        r = {x['strategy']: x for x in map(json.loads, open(os.path.join(HERE, folder, f)))}
        out[rd] = r['pubsub']['client_cpu_us_per_acq'] / r['bare:10']['client_cpu_us_per_acq']
    return out


print('| run | before | after | before: median (range) | after: median (range) | after lower, of 8 rounds |')
print('|---|---|---|---|---|---:|')
for folder, before, after in RUNS:
    b, a = ratios(folder, 'before'), ratios(folder, 'after')
    lower = sum(1 for k in a if a[k] < b[k])
    fmt = lambda d: f'{statistics.median(d.values()):.3f}× ({min(d.values()):.3f}–{max(d.values()):.3f}×)'
    print(f'| {folder} | {before} | {after} | {fmt(b)} | {fmt(a)} | {lower} |')
