#!/usr/bin/env python3
"""Write the variants of run.sh into OUT/<variant>/: their scripts
({acquire,release,seed}.lua) and a mode file that tells harness.py how to
drive them (`script`: protocol 4's ACQUIRE and RELEASE, the working tree's;
`fast`: the MULTI design protocol 4 replaced, its MULTI, SEED, ACQUIRE and
RELEASE of commit MULTI; `lean`: protocol 3's scripts with the lean
argument lists; `floor`; `bare`).

usage: variants.py ROOT OUT   (ROOT: the checkout whose scripts are read)"""
import os
import re
import subprocess
import sys

root, out = sys.argv[1], sys.argv[2]

# The last commit of protocol 3 (its scripts were single files then).
PROTOCOL_3 = '6b9e907'
# The last commit of protocol 4's `MULTI` fast path (replaced by dd642ee).
MULTI = '940c831'


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


def write(variant, mode, acquire, release, seed=None):
    d = os.path.join(out, variant)
    os.makedirs(d, exist_ok=True)
    for name, text in (('acquire', acquire), ('release', release), ('seed', seed)):
        if text is not None:
            open(os.path.join(d, name + '.lua'), 'w').write(text)
    open(os.path.join(d, mode), 'w').close()


# Protocol 4, the working tree's scripts, as relaylock sends them: every
# take is ACQUIRE (its first command `SET NX PX` takes a free lock), every
# release RELEASE (harness.py's `script`).
write('relaylock', 'script', lua('ACQUIRE'), lua('RELEASE'))

# The design protocol 4 replaced, with its scripts (commit MULTI) and driven
# as its client drove them: the `MULTI` fast path for a marked lock, SEED
# for a new record, ACQUIRE for every other try, RELEASE (harness.py's
# `fast`). Measured, not kept.
write('multi', 'fast', lua('ACQUIRE', MULTI), lua('RELEASE', MULTI), lua('SEED', MULTI))

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
