#!/usr/bin/env python3
"""pinned.sh's rounds: the client's CPU per uncontended acquisition of
   relaylock, the bare lock and the fenced floor, and the ratios to the bare
   lock, by how the cores were assigned.
   python3 docs/results/fleet/client-cpu/pinned_summary.py"""
import json, os, statistics

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'pinned')
MODES = (('one', 'core 1, one worker thread'), ('two', 'core 1, two worker threads'),
         ('free', 'both cores, two worker threads'))
print('| bench on | round | relaylock µs | bare:10 µs | floor:10 µs | relaylock / bare | floor / bare |')
print('|---|---:|---:|---:|---:|---:|---:|')
medians = []
for mode, label in MODES:
    ratios = []
    for n in (1, 2, 3):
        r = {x['strategy']: x['client_cpu_us_per_acq'] for x in map(json.loads, open(os.path.join(D, f'{mode}-{n}.jsonl')))}
        q = r['pubsub'] / r['bare:10']
        ratios.append(q)
        print(f"| {label} | {n} | {r['pubsub']:.2f} | {r['bare:10']:.2f} | {r['floor:10']:.2f} | {q:.3f}× | {r['floor:10'] / r['bare:10']:.3f}× |")
    medians.append(f'{label}: median {statistics.median(ratios):.3f}×')
print()
print('  \n'.join(medians) + '  ')
