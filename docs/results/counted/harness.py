#!/usr/bin/env python3
"""The scenarios that run.sh counts: a variant's lock calls on 256 keys,
pipelined (one batch of 256 cycles at a time, one cycle per key), alternating
variants, ROUNDS rounds of CYCLES cycles each; it prints Redis's time inside
the lock's commands per acquisition (INFO commandstats: EVALSHA, MULTI and
EXEC, and the bare lock's SET), the median per variant and scenario (run.sh
counts the whole server's instructions instead, under callgrind).

A variant's mode is the name of a file in its DIR:

  fast   protocol 4, as relaylock sends it (src/calls/mod.rs): a try on
         the fast path is the `MULTI` of `SET p:4:{k} <token> NX PX
         <lease>`, `HINCRBY p:4:{k}:f f 1` (the fence) and `PEXPIRE
         p:4:{k}:f <lease + 60000>`, then `EXEC`; when the `HINCRBY` answers
         2^48 or less (a new record) the SEED script follows (`[lock]`,
         `[token, lease + 60000]`). A try whose `SET` was refused sends
         ACQUIRE (lean: `[lock]`, `[token, lease, client]`), and so does
         every other try. A call's first try takes the fast path only for a
         lock marked so (src/calls/fenced.rs): marked when a call's first
         try took it by ACQUIRE answering a bare fence (free, nobody
         queued), forgotten when a `MULTI` found it taken; so in a
         hand-over every try is ACQUIRE (after one refused `MULTI` of the
         warm-up's holder, in the first cycles, counted in both runs). A
         file `multi-always` sends the `MULTI` first on every call's first
         try instead (no marks). Every release is RELEASE (lean: `[lock]`,
         `[token, fence, client, requeue]`), with the fence the take
         answered (the `EXEC`'s `HINCRBY` element, or ACQUIRE's reply: a
         fence, or `{2, fence}` when taken where others wait or from a
         reservation). DIR holds acquire.lua, release.lua and seed.lua; a
         file `no-record-ttl` drops the `PEXPIRE` from the `MULTI`.
  lean   protocol 3, as relaylock sent it: every take is the ACQUIRE
         script, every release the RELEASE script, lean argument lists
         (`[token, lease, client]`; `[token, 1, client, 0]`: protocol 3's
         RELEASE reads the fence from the value, and only checks that one
         was sent).
  floor  the bench's floor, driven as `lean` is (its scripts ignore the
         client; its release reads no fence and its retention is written
         in, see variants.py); it queues nobody, so a refused try answers 0
         and a release 1.
  bare   the bare lock: the take is `SET key token NX PX`, and the release
         script gets [key] and [token].

  uncontended: a release then a take by one client. With `fast`, the
               release of a fast-path hold (RELEASE's first lines: `GET`,
               `DEL`, the fence into the record's ring) and the `MULTI` (the
               record exists after the warm-up: no SEED).
  contended:   two clients take turns on each key: the other client's try
               that the lock refuses (it joins the queue; with `fast`,
               ACQUIRE, or with `multi-always` a `MULTI` whose `SET`
               answers nil, then ACQUIRE), the holder's RELEASE (a
               reservation for the other client), the other client's next
               try (ACQUIRE: a later try sends no `MULTI`), which takes the
               reservation: the hand-over between processes.

Keys are `p:4:{bench:<i>}` for `fast`, else `p:3:{bench:<i>}` (protocol 3's
names; the floor and the bare lock keep them too). Tokens are relaylock's
length: `<client id>-<16 hex digits>`, 33 bytes; the lease is 30,000 ms.

Every reply is checked (a harness that measured failing calls would be
worthless), and the run stops at the first unexpected one: a release of an
uncontended lock answers 1, a `MULTI`'s `SET` answers OK (uncontended) or nil
(contended), a refused try answers no fence (relaylock's: `-3 - pttl`, it
queued), a contended release hands over (3 or 5; the floor's and the bare
lock's answer 1), the taker's ACQUIRE answers a fence, and fences only grow.
DEBUG=1 prints the first replies of each scenario's first batches (the
warm-up's and the first cycles') too.

usage: harness.py DIR [DIR...]
Environment: PORT (a running server; else one is started from RS,
redis-server), ROUNDS, CYCLES, SCEN, DEBUG."""
import os, re, secrets, socket, subprocess, sys, time, tempfile, statistics

def resp(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)

class Err(str):
    """An error reply."""

class Conn:
    def __init__(s, port):
        s.s = socket.create_connection(('127.0.0.1', port)); s.buf = b''
    def send(s, data): s.s.sendall(data)
    def _line(s):
        while b'\r\n' not in s.buf: s.buf += s.s.recv(1 << 20)
        i = s.buf.index(b'\r\n'); l = s.buf[:i]; s.buf = s.buf[i+2:]; return l
    def _n(s, n):
        while len(s.buf) < n + 2: s.buf += s.s.recv(1 << 20)
        d = s.buf[:n]; s.buf = s.buf[n+2:]; return d
    def read(s):
        l = s._line(); t = l[:1]
        if t == b'+': return l[1:].decode()
        if t == b'-': return Err(l[1:].decode())
        if t == b':': return int(l[1:])
        if t == b'$':
            n = int(l[1:]); return None if n < 0 else s._n(n).decode()
        if t == b'*':
            n = int(l[1:]); return None if n < 0 else [s.read() for _ in range(n)]
        raise SystemExit(f'unexpected reply line {l!r}')
    def cmd(s, *a):
        s.send(resp(*a)); r = s.read()
        if isinstance(r, Err): raise SystemExit(f'{a[0]}: {r}')
        return r

STATS = ('evalsha', 'multi', 'exec')
def lock_us(c, bare):
    """Calls and µs of the lock's top-level commands so far (EVALSHA, MULTI,
    EXEC; and SET for the bare lock: inside a MULTI it is EXEC's time)."""
    info = c.cmd('INFO', 'commandstats')
    calls = us = 0
    for name in STATS + (('set',) if bare else ()):
        m = re.search(r'cmdstat_%s:calls=(\d+),usec=(\d+)' % name, info)
        if m: calls += int(m.group(1)); us += int(m.group(2))
    return calls, us

KEYS = 256
LEASE, RETENTION = 30000, 60000
SEEDED_ABOVE = 1 << 48  # src/scripts/mod.rs: a counter at most this was a new record's
token = lambda cl: cl + '-' + secrets.token_hex(8)  # relaylock's length: 33 bytes


class Bad(SystemExit):
    """An unexpected reply: the run stops."""

MODES = ('fast', 'lean', 'floor', 'bare')

def run(c, shas, scenario, cycles, mode, record_ttl=True, multi_always=False):
    """One scenario of CYCLES cycles on every key; returns the µs and calls
    of the lock's commands per acquisition."""
    acq, rel, seed = shas
    fast = mode == 'fast'
    key = (lambda i: 'p:4:{bench:%d}' % i) if fast else (lambda i: 'p:3:{bench:%d}' % i)
    A, B = 'a1b2c3d4e5f60718', '9f8e7d6c5b4a3921'
    debug = os.environ.get('DEBUG')
    sends = [0]  # batches sent: DEBUG prints the first calls of the first ones

    # Each call is (its requests, the check of their replies); a take's
    # check returns (fence, whether SEED must follow).
    def script_take(k, t, cl, first):
        """ACQUIRE that takes the lock: a fence, or `{2, fence}` (taken
        where others wait, or from a reservation). A call's first try that
        answers a bare fence marks the lock for the fast path."""
        def ok(rs):
            r = rs[0]
            if isinstance(r, int) and r > 0:
                if first: marked.add((cl, k))
                return r, False
            if isinstance(r, list) and len(r) == 2 and r[0] == 2 and isinstance(r[1], int) and r[1] > 0:
                return r[1], False
            raise Bad(f'ACQUIRE answered {r!r}, no fence')
        return [resp('EVALSHA', acq, 1, key(k), t, LEASE, cl)], ok

    def multi(k, t):
        cmds = [resp('MULTI'), resp('SET', key(k), t, 'NX', 'PX', LEASE), resp('HINCRBY', key(k) + ':f', 'f', 1)]
        if record_ttl: cmds.append(resp('PEXPIRE', key(k) + ':f', LEASE + RETENTION))
        return cmds + [resp('EXEC')]

    def exec_reply(rs):
        n = 3 if record_ttl else 2
        if rs[0] != 'OK' or rs[1:1 + n] != ['QUEUED'] * n: raise Bad(f'MULTI answered {rs[:1 + n]!r}')
        ex = rs[1 + n]
        if not (isinstance(ex, list) and len(ex) == n and isinstance(ex[1], int) and ex[1] > 0
                and (not record_ttl or ex[2] == 1)):
            raise Bad(f'EXEC answered {ex!r}')
        return ex

    def first_take(k, t, cl):
        """A client's first try, on a free lock: it takes it."""
        if mode == 'bare':
            def ok(rs):
                if rs[0] != 'OK': raise Bad(f'SET NX answered {rs[0]!r}, not OK')
                return 0, False
            return [resp('SET', key(k), t, 'NX', 'PX', LEASE)], ok
        if not (fast and fast_try(cl, k)): return script_take(k, t, cl, True)
        reqs = multi(k, t)
        def ok(rs):
            ex = exec_reply(rs)
            if ex[0] != 'OK': raise Bad(f"the MULTI's SET answered {ex[0]!r}, not OK")
            return ex[1], ex[1] <= SEEDED_ABOVE
        return reqs, ok

    def refused(k, t, cl):
        """A client's first try, on a held lock: it joins the queue."""
        if mode == 'bare':
            def ok(rs):
                if rs[0] is not None: raise Bad(f'a refused SET NX answered {rs[0]!r}')
            return [resp('SET', key(k), t, 'NX', 'PX', LEASE)], ok
        queue = [resp('EVALSHA', acq, 1, key(k), t, LEASE, cl)]
        pre = multi(k, t) if fast and fast_try(cl, k) else []
        def ok(rs):
            if pre:
                ex = exec_reply(rs)
                if ex[0] is not None: raise Bad(f"a refused MULTI's SET answered {ex[0]!r}")
                marked.discard((cl, k))  # found taken: contended, forgotten
            q = rs[len(pre)]
            # The floor answers 0 (held); relaylock -3 - pttl: queued.
            if q != 0 if mode == 'floor' else not (isinstance(q, int) and q < -3):
                raise Bad(f'a refused ACQUIRE answered {q!r}')
        return pre + queue, ok

    def later_take(k, t, cl):
        """The queued client's next try: it takes the reservation."""
        return first_take(k, t, cl) if mode == 'bare' else script_take(k, t, cl, False)

    def release(k, t, cl, fence, want):
        if mode == 'bare': reqs = [resp('EVALSHA', rel, 1, key(k), t)]
        else: reqs = [resp('EVALSHA', rel, 1, key(k), t, fence if fast else 1, cl, 0)]
        def ok(rs):
            if rs[0] not in want: raise Bad(f'RELEASE answered {rs[0]!r}, not one of {want}')
        return reqs, ok

    def seed_call(k, t):
        def ok(rs):
            if not (isinstance(rs[0], int) and rs[0] > SEEDED_ABOVE): raise Bad(f'SEED answered {rs[0]!r}')
            return rs[0]
        return [resp('EVALSHA', seed, 1, key(k), t, LEASE + RETENTION)], ok

    def send(calls):
        """Send the calls' requests in one batch, read every reply, and
        return each call's check."""
        c.send(b''.join(r for reqs, _ in calls for r in reqs))
        sends[0] += 1; out = []
        for reqs, ok in calls:
            rs = [c.read() for _ in reqs]
            for r in rs:
                if isinstance(r, Err): raise Bad(f'error reply: {r}')
            if debug and sends[0] <= 4 and len(out) < 3:
                print(f'{scenario} {mode} #{sends[0]}: {rs}', file=sys.stderr)
            out.append(ok(rs))
        return out

    ks = list(range(KEYS))
    marked = set()  # (client, key): may take the fast path (src/calls/fenced.rs)
    fast_try = (lambda cl, k: True) if multi_always else (lambda cl, k: (cl, k) in marked)
    holder = {}  # key -> (client, token, fence)
    last = {}    # key -> the newest fence

    def took(taken):
        """Note each key's new fence ({key: (fence, seed?)}); send SEED where
        the MULTI made a new record, as the client does."""
        need = [k for k, (_, s) in taken.items() if s]
        fences = {k: f for k, (f, _) in taken.items()}
        if need:
            for k, f in zip(need, send([seed_call(k, holder[k][1]) for k in need])):
                fences[k] = f
        for k, f in fences.items():
            if mode != 'bare' and not f > last.get(k, 0): raise Bad(f'fence {f} after {last.get(k)}')
            last[k] = f
            cl, t, _ = holder[k]; holder[k] = (cl, t, f)

    c.cmd('FLUSHALL')
    # Warm-up: each key taken by A (with `fast`, by ACQUIRE: a client's first
    # take of a lock on its connection is the script; unless `multi-always`).
    for k in ks: holder[k] = (A, token(A), None)
    took(dict(zip(ks, send([first_take(k, holder[k][1], A) for k in ks]))))
    c.cmd('CONFIG', 'RESETSTAT')
    handed = (1,) if mode in ('floor', 'bare') else (3, 5)
    for cyc in range(cycles):
        calls = []
        if scenario == 'uncontended':
            for k in ks:
                h, ht, hf = holder[k]; t = token(h)
                calls += [release(k, ht, h, hf, (1,)), first_take(k, t, h)]
                holder[k] = (h, t, None)
            took(dict(zip(ks, send(calls)[1::2])))
        else:
            for k in ks:
                h, ht, hf = holder[k]; o = B if h == A else A; t = token(o)
                calls += [refused(k, t, o), release(k, ht, h, hf, handed), later_take(k, t, o)]
                holder[k] = (o, t, None)
            took(dict(zip(ks, send(calls)[2::3])))
    n, us = lock_us(c, mode == 'bare')
    return us / (cycles * KEYS), n / (cycles * KEYS)

def main():
    port = int(os.environ.get('PORT', '0')) or None
    d = tempfile.mkdtemp()
    if not port:
        s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
        subprocess.run([os.environ.get('RS', 'redis-server'), '--port', str(port), '--save', '', '--appendonly', 'no', '--daemonize', 'yes', '--logfile', d + '/log', '--pidfile', d + '/pid'], check=True)
        time.sleep(0.5)
    c = Conn(port)
    try:
        variants = sys.argv[1:]
        load = lambda v, f: c.cmd('SCRIPT', 'LOAD', open(os.path.join(v, f)).read()) if os.path.exists(os.path.join(v, f)) else None
        shas, modes = {}, {}
        for v in variants:
            shas[v] = tuple(load(v, f) for f in ('acquire.lua', 'release.lua', 'seed.lua'))
            found = [m for m in MODES if os.path.exists(os.path.join(v, m))]
            if len(found) != 1: raise SystemExit(f'{v}: expected one mode file of {MODES}, found {found}')
            modes[v] = found[0]
            if modes[v] == 'fast' and None in shas[v]: raise SystemExit(f'{v}: fast needs acquire, release and seed')
        rounds = int(os.environ.get('ROUNDS', '5')); cycles = int(os.environ.get('CYCLES', '200'))
        res = {}
        scs = os.environ.get('SCEN', 'uncontended,contended').split(',')
        for r in range(rounds):
            for sc in scs:
                for v in variants:
                    ttl = not os.path.exists(os.path.join(v, 'no-record-ttl'))
                    always = os.path.exists(os.path.join(v, 'multi-always'))
                    us, calls = run(c, shas[v], sc, cycles, modes[v], ttl, always)
                    res.setdefault((sc, v), []).append(us)
        for sc in scs:
            for v in variants:
                xs = res[(sc, v)]
                print(f'{sc:12} {v:20} median {statistics.median(xs):6.2f} us/acq  all {" ".join("%.2f" % x for x in xs)}')
    finally:
        c.send(resp('SHUTDOWN', 'NOSAVE')) if not os.environ.get('PORT') else None
main()
