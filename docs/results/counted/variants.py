#!/usr/bin/env python3
"""Write the variants of run.sh into OUT/<variant>/: their scripts
({acquire,release,seed}.lua) and a mode file that tells harness.py how to
drive them (`fast`: protocol 4's MULTI, SEED, ACQUIRE and RELEASE; `lean`:
protocol 3's scripts with the lean argument lists; `floor`; `bare`), plus
the flag files `no-record-ttl` (the MULTI sends no PEXPIRE) and
`multi-always` (every call's first try is the MULTI).

usage: variants.py ROOT OUT   (ROOT: the checkout whose scripts are read)"""
import os
import re
import subprocess
import sys

root, out = sys.argv[1], sys.argv[2]

# The last commit of protocol 3 (its scripts were single files then).
PROTOCOL_3 = '6b9e907'


def read(path, rev=None):
    """A file of the checkout (its working tree), or of the commit REV."""
    if rev is None:
        return open(os.path.join(root, path)).read()
    return subprocess.run(['git', '-C', root, 'show', f'{rev}:{path}'], capture_output=True,
                          text=True, check=True).stdout


def lua(name, rev=None):
    """The script constant NAME as src/scripts/mod.rs makes it (of the
    working tree, or of the commit REV): the bytes of its files, in
    `concat!`'s order (one `include_str!` is one file)."""
    mod = read('src/scripts/mod.rs', rev)
    m = re.search(r'pub const %s: &str = (include_str!\("[^"]+"\)|concat!\((.*?)\));' % name, mod, re.S)
    if not m:
        raise SystemExit(f'{name} not found in src/scripts/mod.rs')
    files = re.findall(r'include_str!\("([^"]+)"\)', m.group(1))
    return ''.join(read('src/scripts/' + f, rev) for f in files)


def rust_str(path, name):
    """The raw string constant NAME of a Rust source file."""
    m = re.search(r'pub const %s: &str = r#"\n(.*?)"#;' % name, open(path).read(), re.S)
    if not m:
        raise SystemExit(f'{name} not found in {path}')
    return m.group(1)


def edit(text, old, new):
    if text.count(old) != 1:
        raise SystemExit(f'expected one {old!r} in the script')
    return text.replace(old, new)


def write(variant, mode, acquire, release, seed=None, flags=()):
    d = os.path.join(out, variant)
    os.makedirs(d, exist_ok=True)
    for name, text in (('acquire', acquire), ('release', release), ('seed', seed)):
        if text is not None:
            open(os.path.join(d, name + '.lua'), 'w').write(text)
    for f in (mode,) + tuple(flags):
        open(os.path.join(d, f), 'w').close()


# Protocol 4, the working tree's scripts, as relaylock sends them: the
# `MULTI` fast path, SEED for a new record, ACQUIRE (after a refused `SET`,
# and for every try not on the fast path), RELEASE (harness.py's `fast`).
acquire, release, seed = lua('ACQUIRE'), lua('RELEASE'), lua('SEED')
write('relaylock', 'fast', acquire, release, seed)

# The same, the `MULTI` without its `PEXPIRE` of the record: what the
# record's TTL costs (a design not kept: a record would outlive its lock).
write('no-record-ttl', 'fast', acquire, release, seed, flags=('no-record-ttl',))

# The same, the `MULTI` sent first on every call's first try, contended
# locks too (no marks, src/calls/fenced.rs): a hand-over's refused try is a
# `MULTI` whose `SET` answers nil, then ACQUIRE (a design not kept).
write('multi-always', 'fast', acquire, release, seed, flags=('multi-always',))

# Protocol 3: the scripts of its last commit, driven as relaylock drove them
# (every take is ACQUIRE, every release RELEASE, lean argument lists).
write('protocol-3', 'lean', lua('ACQUIRE', PROTOCOL_3), lua('RELEASE', PROTOCOL_3))

# The bench's floor: its acquire as it is (ARGV [token, lease_ms]); its
# release takes the retention as ARGV[2], where the lean call sends the
# fence, so the retention is written in.
bare = os.path.join(root, 'relaylock-cli/src/bench/bare.rs')
write('floor', 'floor', rust_str(bare, 'FLOOR_ACQUIRE'),
      edit(rust_str(bare, 'FLOOR_RELEASE'), "'PX', ARGV[2]", "'PX', 60000"))

# The bare lock: `SET key token NX PX` (harness.py's `bare` mode) and the
# seeds' release script.
write('bare', 'bare', None, rust_str(bare, 'RELEASE'))
