#!/usr/bin/env python3
"""Print run.sh's counts: DIR holds callgrind's files cg.<variant>.<scenario>.<cycles>
for 40 and 80 cycles of harness.py (256 keys: one acquisition per key and cycle).
The variants are those with files in DIR, in run.sh's order; the ratios to
the bare lock and the floor, and the parts, need those variants counted
(the parts: relaylock and any of multi, protocol-3, the floor and the bare
lock).

usage: count.py DIR"""
import hashlib
import os
import re
import subprocess
import sys

d = sys.argv[1]
PER = 40 * 256  # acquisitions between the run of 40 cycles and the one of 80
ALL = ['relaylock', 'multi', 'protocol-3', 'floor', 'bare']
SCENARIOS = ['uncontended', 'contended']
VARIANTS = [v for v in ALL if os.path.exists(os.path.join(d, f'cg.{v}.{SCENARIOS[0]}.80'))]
# The breakdown's columns: those of these counted.
COLUMNS = [v for v in ('relaylock', 'multi', 'protocol-3', 'floor', 'bare') if v in VARIANTS]
PARTS = [
    ('processMultibulkBuffer', 'reading the requests (every command)'),
    ('processCommand', 'the commands, from lookup to reply'),
    ('multiCommand', '  MULTI'),
    ('queueMultiCommand', '  queueing a command of a MULTI'),
    ('execCommand', '  EXEC, all of it'),
    ('evalGenericCommand', '  EVALSHA, all of it'),
    ('luaCreateArray', '    KEYS and ARGV tables'),
    ('lua_pcall', '    the script run'),
    ('luaRedisGenericCommand', '      redis.call, all of it'),
    ('scriptCall', '        the commands themselves'),
    ('luaS_newlstr', '    Lua string creation, all of EVALSHA'),
    ('str_sub', '    string.sub'),
    ('str_find_aux', '    string.find and string.match'),
    ('luaV_concat', '    concatenation (..)'),
    ('luaB_tonumber', '    tonumber'),
    ('str_format', '    string.format'),
    ('luaC_step', '    the collector, in the run and after it'),
    ('setCommand', 'SET, in EXEC or a script'),
    ('getCommand', 'GET, in a script'),
    ('delCommand', 'DEL, in a script'),
    ('hgetCommand', 'HGET, in a script'),
    ('timeCommand', 'TIME, in a script'),
    ('hincrbyCommand', 'HINCRBY, in EXEC'),
    ('hsetCommand', 'HSET, in a script'),
    ('pexpireCommand', 'PEXPIRE, in EXEC or a script'),
    ('serverCron', 'the timer (serverCron)'),
]


def path(v, sc, cycles):
    return os.path.join(d, f'cg.{v}.{sc}.{cycles}')


def total(f):
    for line in open(f):
        if line.startswith(('summary:', 'totals:')):
            return int(line.split()[1])
    raise SystemExit(f'no total in {f}')


LINE = re.compile(r'\s*([\d,]+)\s+\(.*?\)\s+(.*)')


def inclusive(f):
    """Each function's inclusive count, by its name alone (its first line:
    callgrind_annotate lists the largest first)."""
    out = subprocess.run(['callgrind_annotate', '--inclusive=yes', '--threshold=100', f],
                         capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m and 'PROGRAM TOTALS' not in line:
            fn = re.match(r'\S*?:([A-Za-z_]\w*)', m.group(2))
            if fn:
                found.setdefault(fn.group(1), int(m.group(1).replace(',', '')))
    return found


def per_acq(a, b):
    return (b - a) / PER


def fmt(x):
    """A count as printed: whole instructions, no `-0`."""
    return f'{int(round(x)):,}'


counts = {(v, sc): per_acq(total(path(v, sc, 40)), total(path(v, sc, 80)))
          for v in VARIANTS for sc in SCENARIOS}
have = [v for v in ('bare', 'floor') if v in VARIANTS]
print('instructions per acquisition, the whole server (run of 80 cycles minus run of 40);')
change = ['and the change from relaylock'] if 'relaylock' in VARIANTS and len(VARIANTS) > len(have) + 1 else []
print('in brackets: ' + ', '.join([f'x the {"bare lock" if v == "bare" else v}' for v in have] + change))
print(f'{"variant":12}' + ''.join(f'{sc:>38}' for sc in SCENARIOS))
for v in VARIANTS:
    cells = []
    for sc in SCENARIOS:
        n = counts[(v, sc)]
        note = [f'{n / counts[(b, sc)]:.2f}x' for b in have]
        if v not in ('relaylock', 'floor', 'bare') and 'relaylock' in VARIANTS:
            rl = counts[('relaylock', sc)]
            note.append(f'{(n - rl) / rl * 100:+.1f}%')
        cells.append(f'{n:9,.0f} ({", ".join(note)})' if note else f'{n:9,.0f}')
    print(f'{v:12}' + ''.join(f'{c:>38}' for c in cells))
if 'relaylock' in VARIANTS and len(COLUMNS) > 1:
    more = 'protocol-3' in COLUMNS
    for sc in SCENARIOS:
        print(f'\n{sc}: by part, inclusive, instructions per acquisition (the parts overlap: strings are\n'
              'made inside string.sub, concatenation and string.format too; a command in a script\n'
              'or an EXEC counts within it too)' + ('; 4 - 3: relaylock (protocol 4) minus protocol-3' if more else ''))
        print(f'{"part":46}' + ''.join(f'{v:>11}' for v in COLUMNS) + (f'{"4 - 3":>9}' if more else ''))
        got = {v: (inclusive(path(v, sc, 40)), inclusive(path(v, sc, 80))) for v in COLUMNS}
        for fn, label in PARTS:
            c = {v: per_acq(got[v][0].get(fn, 0), got[v][1].get(fn, 0)) for v in COLUMNS}
            print(f'{label:46}' + ''.join(f'{fmt(c[v]):>11}' for v in COLUMNS)
                  + (f'{fmt(c["relaylock"] - c["protocol-3"]):>9}' if more else ''))
        c = {v: counts[(v, sc)] for v in COLUMNS}
        print(f'{"the whole server":46}' + ''.join(f'{fmt(c[v]):>11}' for v in COLUMNS)
              + (f'{fmt(c["relaylock"] - c["protocol-3"]):>9}' if more else ''))

# Which scripts were counted: each variant's, by the SHA-1 Redis names it by.
print('\nscripts counted, by SHA-1 (EVALSHA\'s name; variants.py wrote them):')
for v in VARIANTS:
    names = [f'{f} {hashlib.sha1(open(os.path.join(d, v, f + ".lua"), "rb").read()).hexdigest()[:12]}'
             for f in ('acquire', 'release', 'seed') if os.path.exists(os.path.join(d, v, f + '.lua'))]
    print(f'{v:14}' + ', '.join(names))
