#!/usr/bin/env python3
"""profile.sh's reports: self time of the tokio workers per acquisition,
   by crate (or libc/kernel part), then the symbols that differ most."""
import collections, json, os, re, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parts as split  # noqa: E402

def load(base):
    acq = json.loads(open(base + '.jsonl').readline())['acquisitions']
    out = subprocess.run(['perf', 'report', '-i', base + '.data', '--no-children', '--comm',
                          'tokio-rt-worker', '--sort', 'dso,sym', '--stdio', '-g', 'none',
                          '-F', 'period,dso,sym'], capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r'\s*(\d+)\s+(\S+)\s+\[(.)\]\s+(.*)', line)
        if m:
            rows.append((int(m.group(1)) / acq / 1000, m.group(2), m.group(4).strip()))
    return acq, rows

def part(dso, sym):
    if 'kernel' in dso:
        return 'kernel'
    return split.part(sym, dso.startswith('lib'), 'libc, other', split.CRATES,
                      ('relaylock::worker', 'the bench'))

names = ('floor:10', 'relaylock')
data = [load(b) for b in sys.argv[1:3]]
parts = [collections.Counter() for _ in data]
syms = [collections.Counter() for _ in data]
for i, (_, rows) in enumerate(data):
    for us, dso, sym in rows:
        parts[i][part(dso, sym)] += us
        syms[i][sym] += us
print(f'acquisitions profiled: floor:10 {data[0][0]}, relaylock {data[1][0]}')
print(f'{"µs per acquisition, self time":32} {names[0]:>9} {names[1]:>10}')
for k in sorted(set(parts[0]) | set(parts[1]), key=lambda k: -parts[1][k]):
    print(f'{k:32} {parts[0][k]:9.2f} {parts[1][k]:10.2f}')
print(f'{"all":32} {sum(parts[0].values()):9.2f} {sum(parts[1].values()):10.2f}')
print('\nthe 20 symbols relaylock spends most more on:')
for s in sorted(set(syms[0]) | set(syms[1]), key=lambda s: syms[0][s] - syms[1][s])[:20]:
    print(f'{syms[0][s]:6.3f} {syms[1][s]:6.3f}  {s[:110]}')
