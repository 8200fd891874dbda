"""The parts profile.py and instructions.py sum a symbol's cost into: glibc's
   allocator, its copies, the rest of the C libraries, then by crate."""
import re

CRATES = ['relaylock::', 'fred::', 'redis_protocol', 'tokio_util', 'tokio::', 'metrics', 'dashmap',
          'bytes::', 'futures', 'core::', 'alloc::', 'std::']

def part(sym, in_libc, libc_other, crates, own):
    """`own` is (the prefix of the measuring program's symbols, its label), tried first."""
    if in_libc:
        if re.search(r'malloc|free|realloc|unlink_chunk|consolidate', sym):
            return 'libc malloc/free'
        if 'mem' in sym:
            return 'libc memcpy/memmove'
        return libc_other
    prefix, label = own
    if prefix in sym:
        return prefix.rstrip(':') + f' ({label})'
    for p in crates:
        if p in sym:
            return p.rstrip(':')
    return 'other'
