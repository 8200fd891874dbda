#!/usr/bin/env python3
"""The scenarios that run.sh counts: a variant's lock calls on 256 keys,
pipelined (one batch of 256 cycles at a time, one cycle per key), alternating
variants, ROUNDS rounds of CYCLES cycles each; it prints Redis's time inside
the lock's commands per acquisition (INFO commandstats: EVALSHA, MULTI and
EXEC, and the bare lock's SET), the median per variant and scenario (run.sh
counts the whole server's instructions instead, under callgrind).

A variant's mode is the name of a file in its DIR:

  script relaylock's protocol 4 as it is (src/calls/mod.rs): every take is
         the ACQUIRE script (lean: `[lock]`, `[token, lease, client]`),
         whose first command, `SET p:4:{k} <token> NX PX <lease>`, takes
         a free lock (then `EXISTS` of the lock's voids key, none here,
         and the fence from the record: `HGET`, `TIME`, `HSET`,
         `PEXPIRE`; the value is the token alone); every
         release is RELEASE (lean: `[lock]`, `[token, fence, client,
         requeue]`), with the fence the take answered.
  fast   the `MULTI` design protocol 4 replaced (commit 940c831, as its
         client sent it: src/calls/mod.rs and fenced.rs there): a try on
         the fast path is the `MULTI` of `SET p:4:{k} <token> NX PX
         <lease>`, `HINCRBY p:4:{k}:f f 1` (the fence) and `PEXPIRE
         p:4:{k}:f <lease + 60000> GT`, then `EXEC`; when the `HINCRBY`
         answers 2^48 or less (a new record) the SEED script follows
         (`[lock]`, `[token, lease + 60000]`; never here). Every other try
         is ACQUIRE (lean). A call's first try takes the fast path only for
         a lock marked so: marked when a call's first try took it by
         ACQUIRE answering a bare fence (free, nobody queued), forgotten
         when a `MULTI` found it taken; so in a hand-over every try is
         ACQUIRE (after the first cycles, counted in both runs). Releases
         as `script`'s, with the fence the take answered (the `EXEC`'s
         `HINCRBY` element, or ACQUIRE's reply: a fence, or `{2, fence}`
         when taken where others wait or from a reservation). DIR holds
         acquire.lua, release.lua and seed.lua.
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

  uncontended: a release then a take by one client. With `script`,
               RELEASE's first lines (`GET`, `DEL`, the fence into the
               record's ring: `HSET`) and ACQUIRE's `SET NX`, `EXISTS`
               and the record's four commands; with `fast`, the same
               release and the `MULTI` (the record exists after the
               warm-up: no SEED).
  contended:   two clients take turns on each key: the other client's try
               that the lock refuses (ACQUIRE: it joins the queue), the
               holder's RELEASE (a reservation for the other client), the
               other client's next try (ACQUIRE, with `fast` too: a later
               try sends no `MULTI`), which takes the reservation: the
               hand-over between processes.

Keys are `p:4:{bench:<i>}` for `script` and `fast`, else `p:3:{bench:<i>}`
(protocol 3's names; the floor and the bare lock keep them too). Tokens are
relaylock's length and shape: `<client id>-<16 hex digits>`, the id 16 hex
digits, 33 bytes; the lease is 30,000 ms.

Every reply is checked (a harness that measured failing calls would be
worthless), and the run stops at the first unexpected one: a release of an
uncontended lock answers 1, a take answers a fence (> 0; with `fast`, a
`MULTI`'s `SET` answers OK, its `PEXPIRE` 1 or 0), a refused try answers no fence
(relaylock's: `-3 - pttl`, it queued), a contended release hands over (3 or
5; the floor's and the bare lock's answer 1), and fences only grow. After
the last batch of a scenario, with `script` and `fast`, every key's value is
read (`GET`, pipelined; the same 256 in a run of 40 cycles as in one of 80,
so they cancel out of run.sh's counts) and must be the holder's token alone
(uncontended) or `<token>:<fence>||` with the fence its take answered
(contended). DEBUG=1 prints the first replies of each scenario's first
batches (the warm-up's and the first cycles') too.

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

MODES = ('script', 'fast', 'lean', 'floor', 'bare')

def run(c, shas, scenario, cycles, mode):
    """One scenario of CYCLES cycles on every key; returns the µs and calls
    of the lock's commands per acquisition."""
    acq, rel, seed = shas
    fast = mode == 'fast'
    p4 = mode in ('script', 'fast')  # protocol 4: its names, its fences sent back
    key = (lambda i: 'p:4:{bench:%d}' % i) if p4 else (lambda i: 'p:3:{bench:%d}' % i)
    A, B = 'a1b2c3d4e5f60718', '9f8e7d6c5b4a3921'
    debug = os.environ.get('DEBUG')
    sends = [0]  # batches sent: DEBUG prints the first calls of the first ones

    # Each call is (its requests, the check of their replies); a take's
    # check returns (fence, whether SEED must follow).
    def script_take(k, t, cl, first):
        """ACQUIRE that takes the lock: a fence; with `fast` also `{2,
        fence}` (taken where others wait, or from a reservation), and a
        call's first try that answers a bare fence marks the lock for the
        fast path."""
        def ok(rs):
            r = rs[0]
            if isinstance(r, int) and r > 0:
                if fast and first: marked.add((cl, k))
                return r, False
            if (fast and isinstance(r, list) and len(r) == 2 and r[0] == 2
                    and isinstance(r[1], int) and r[1] > 0):
                return r[1], False
            raise Bad(f'ACQUIRE answered {r!r}, no fence')
        return [resp('EVALSHA', acq, 1, key(k), t, LEASE, cl)], ok

    def multi(k, t):
        return [resp('MULTI'), resp('SET', key(k), t, 'NX', 'PX', LEASE),
                resp('HINCRBY', key(k) + ':f', 'f', 1),
                resp('PEXPIRE', key(k) + ':f', LEASE + RETENTION, 'GT'), resp('EXEC')]

    def exec_reply(rs):
        if rs[0] != 'OK' or rs[1:4] != ['QUEUED'] * 3: raise Bad(f'MULTI answered {rs[:4]!r}')
        ex = rs[4]
        # `PEXPIRE ... GT` answers 1 when it moved the record's expiry
        # later (the take before set it, a batch earlier), 0 when it was
        # within the same millisecond.
        if not (isinstance(ex, list) and len(ex) == 3 and isinstance(ex[1], int) and ex[1] > 0
                and ex[2] in (0, 1)):
            raise Bad(f'EXEC answered {ex!r}')
        return ex

    def first_take(k, t, cl):
        """A client's first try, on a free lock: it takes it."""
        if mode == 'bare':
            def ok(rs):
                if rs[0] != 'OK': raise Bad(f'SET NX answered {rs[0]!r}, not OK')
                return 0, False
            return [resp('SET', key(k), t, 'NX', 'PX', LEASE)], ok
        if not (fast and (cl, k) in marked): return script_take(k, t, cl, True)
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
        pre = multi(k, t) if fast and (cl, k) in marked else []
        def ok(rs):
            if pre:
                # Only the warm-up's holder's first refused try (its mark
                # from the warm-up): then forgotten, as fenced.rs does.
                ex = rs[4] if rs[:4] == ['OK'] + ['QUEUED'] * 3 else None
                if not (isinstance(ex, list) and len(ex) == 3 and ex[0] is None):
                    raise Bad(f'a refused MULTI answered {rs[:5]!r}')
                marked.discard((cl, k))
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
        else: reqs = [resp('EVALSHA', rel, 1, key(k), t, fence if p4 else 1, cl, 0)]
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
    marked = set()  # (client, key): may take the fast path (940c831's src/calls/fenced.rs)
    holder = {}  # key -> (client, token, fence)
    last = {}    # key -> the newest fence

    def took(taken):
        """Note each key's new fence ({key: (fence, seed?)}); send SEED where
        the MULTI made a new record, as that client did."""
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
    # take of a lock on its connection is the script).
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
    if p4:
        # Each key's value: the holder's token alone (uncontended: a hold
        # the `SET NX` took), or its token and fence with an empty queue
        # (contended: taken from a reservation).
        c.send(b''.join(resp('GET', key(k)) for k in ks))
        for k in ks:
            v = c.read(); _, t, f = holder[k]
            want = t if scenario == 'uncontended' else f'{t}:{f}||'
            if v != want: raise Bad(f'{key(k)} holds {v!r}, not {want!r}')
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
            if modes[v] == 'script' and None in shas[v][:2]: raise SystemExit(f'{v}: script needs acquire and release')
        rounds = int(os.environ.get('ROUNDS', '5')); cycles = int(os.environ.get('CYCLES', '200'))
        res = {}
        scs = os.environ.get('SCEN', 'uncontended,contended').split(',')
        for r in range(rounds):
            for sc in scs:
                for v in variants:
                    us, calls = run(c, shas[v], sc, cycles, modes[v])
                    res.setdefault((sc, v), []).append(us)
        for sc in scs:
            for v in variants:
                xs = res[(sc, v)]
                print(f'{sc:12} {v:20} median {statistics.median(xs):6.2f} us/acq  all {" ".join("%.2f" % x for x in xs)}')
    finally:
        c.send(resp('SHUTDOWN', 'NOSAVE')) if not os.environ.get('PORT') else None
main()
