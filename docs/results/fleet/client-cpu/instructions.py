#!/usr/bin/env python3
"""instructions.sh's report: instructions per acquisition by part (self
   cost, callgrind_annotate), before and after, then the relaylock
   functions whose inclusive cost changed most."""
import collections, os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))
import callgrind  # noqa: E402
import parts as split  # noqa: E402

PER = 2000  # acquisitions between the two runs

def annotate(f, inclusive):
    d = collections.Counter()
    for n, rest in callgrind.lines(f, inclusive):
        name = re.sub(r' \[/[^\]]*relaylock-allocs[^\]]*\]$|\s\[/tmp/[^\]]*\]$', '', rest)
        d[name] += n
    return d

def per_acq(base, inclusive):
    a, b = annotate(base + '-1000.out', inclusive), annotate(base + '-3000.out', inclusive)
    return {k: (b[k] - a[k]) / PER for k in set(a) | set(b)}

def part(sym):
    in_libc = 'libc.so' in sym or 'ld-linux' in sym or 'libm.so' in sym
    return split.part(sym, in_libc, 'libc/libm, other', split.CRATES + ['hashbrown', 'rapidhash'],
                      ('relaylock_allocs', 'the harness'))

labels = tuple(sys.argv[3:5]) if len(sys.argv) > 4 else ('before', 'after')
selfs = [per_acq(b, False) for b in sys.argv[1:3]]
parts = [collections.Counter() for _ in selfs]
for i, r in enumerate(selfs):
    for k, v in r.items():
        parts[i][part(k)] += v
print('instructions per acquisition (lock + release), self cost by part')
print(f'{"part":28} {labels[0]:>9} {labels[1]:>9}')
for k in sorted(set(parts[0]) | set(parts[1]), key=lambda k: -parts[0][k]):
    print(f'{k:28} {parts[0][k]:9.0f} {parts[1][k]:9.0f}')
t0, t1 = sum(parts[0].values()), sum(parts[1].values())
print(f'{"all":28} {t0:9.0f} {t1:9.0f}  ({(t1 - t0) / t0 * 100:+.1f}%)')
inc = [per_acq(b, True) for b in sys.argv[1:3]]
print('\nrelaylock functions whose inclusive cost changed most (instructions per acquisition):')
keys = [k for k in set(inc[0]) | set(inc[1]) if 'relaylock::' in k]
for k in sorted(keys, key=lambda k: -abs(inc[1].get(k, 0) - inc[0].get(k, 0)))[:14]:
    print(f'{inc[0].get(k, 0):7.0f} {inc[1].get(k, 0):7.0f}  {k.replace("???:", "")[:100]}')
