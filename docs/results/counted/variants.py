#!/usr/bin/env python3
"""Write the script variants of run.sh into OUT/<variant>/{acquire,release}.lua
(each with a `lean` file: harness.py sends relaylock's lean argument lists).

usage: variants.py ROOT OUT   (ROOT: the checkout whose scripts are read)"""
import os
import re
import sys

root, out = sys.argv[1], sys.argv[2]


def lua(name):
    """The script constant NAME as src/scripts/mod.rs makes it: the bytes of
    its files, in `concat!`'s order (one `include_str!` is one file)."""
    mod = open(os.path.join(root, 'src/scripts/mod.rs')).read()
    m = re.search(r'pub const %s: &str = (include_str!\("[^"]+"\)|concat!\((.*?)\));' % name, mod, re.S)
    if not m:
        raise SystemExit(f'{name} not found in src/scripts/mod.rs')
    files = re.findall(r'include_str!\("([^"]+)"\)', m.group(1))
    return ''.join(open(os.path.join(root, 'src/scripts', f)).read() for f in files)


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


def write(variant, acquire, release, mode='lean'):
    d = os.path.join(out, variant)
    os.makedirs(d, exist_ok=True)
    if acquire is not None:
        open(os.path.join(d, 'acquire.lua'), 'w').write(acquire)
    open(os.path.join(d, 'release.lua'), 'w').write(release)
    open(os.path.join(d, mode), 'w').close()


acquire, release = lua('ACQUIRE'), lua('RELEASE')
write('relaylock', acquire, release)

# RELEASE keeps no ring: it reads no newest fence from the old ring and
# writes an empty one (the tombstone `-<f>|||`).
no_ring = edit(release, "local r1 = c > b + 1 and string.match(v, '^%d+', b + 1)", "local r1 = false")
write('no-ring', acquire, edit(no_ring, "local tail = '|' .. rhead", "local tail = '|'"))

# No queue-times record: the lean call derives no `since` name.
write('no-times', edit(acquire, "local since = KEYS[4] or (not KEYS[2] and KEYS[1] .. ':q')",
                       "local since = false"), release)

# A fast path ahead of the parse: a tombstone `-<f>||<ring>|` (no queue, an
# empty void field, no fourth `|` in the ring) is taken as the full path would
# take it, the new value built from the tombstone's own `||<ring>|`.
FAST = """local v = redis.call('GET', KEYS[1])
if v and string.byte(v, 1) == 45 and string.byte(v, -1) == 124 then
  local a = string.find(v, '|', 2, true)
  if a and string.byte(v, a + 1) == 124 and string.find(v, '|', a + 2, true) == #v then
    local last = tonumber(string.sub(v, 2, a - 1)) or 0
    local t = redis.call('TIME')
    local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if last >= fence then fence = last + 1 end
    redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%d', fence) .. string.sub(v, a), 'PX', ARGV[2])
    return fence
  end
end
"""
write('fast-take', edit(acquire, "local v = redis.call('GET', KEYS[1])\n", FAST), release)

# The last fence compared as text, parsed only when it is not older than
# `now` (a 16-digit `tonumber` is a `strtod` of about 2,000 instructions).
TEXT_FENCE = [
    ("local last, reserved, pttl = 0, false, nil", "local last, reserved, pttl = '', false, nil"),
    ("local kind = string.sub(head, 1, 1)", "local kind = string.byte(head, 1)"),
    ("elseif kind == '-' then", "elseif kind == 45 then"),
    ("  last = tonumber(string.sub(head, 2)) or 0", "  last = string.sub(head, 2)"),
    ("elseif kind == '~' then", "elseif kind == 126 then"),
    ("  last = tonumber(rf) or 0", "  last = rf or ''"),
    ("if last >= fence then fence = last + 1 end", """local fs = string.format('%d', fence)
if #last > #fs or (#last == #fs and last >= fs) then
  local l = tonumber(last)
  if l and l >= fence then fence = l + 1; fs = string.format('%d', fence) end
end"""),
    ("local fs = string.format('%d', fence)\nredis.call", "redis.call"),
]
text_fence = acquire
for old, new in TEXT_FENCE:
    text_fence = edit(text_fence, old, new)
write('text-fence', text_fence, release)

# The bench's floor: its acquire as it is (ARGV [token, lease_ms]); its
# release takes the retention as ARGV[2], where the lean call sends the
# fence, so the retention is written in.
bare = os.path.join(root, 'relaylock-cli/src/bench/bare.rs')
write('floor', rust_str(bare, 'FLOOR_ACQUIRE'),
      edit(rust_str(bare, 'FLOOR_RELEASE'), "'PX', ARGV[2]", "'PX', 60000"))

# The bare lock: `SET key token NX PX` (harness.py's `bare` mode) and the
# seeds' release script.
write('bare', None, rust_str(bare, 'RELEASE'), mode='bare')
