#!/usr/bin/env python3
"""The scenarios that run.sh counts: the ACQUIRE and RELEASE scripts of
variants, on 256 keys, pipelined (one batch of 256 cycles at a time),
alternating variants, ROUNDS rounds of CYCLES cycles each; it prints
Redis's time inside EVALSHA per acquisition (INFO commandstats), the median
per variant and scenario (run.sh counts the whole server's instructions
instead, under callgrind).

  uncontended: RELEASE then ACQUIRE by one client (a tombstone taken).
  contended:   two clients take turns on each key: the other client's
               refused ACQUIRE (it joins the queue), the holder's RELEASE
               (a reservation for it), its ACQUIRE (takes the reservation):
               the hand-over between processes.

Tokens are relaylock's: `<client id>-<16 hex digits>`, 33 bytes.

usage: harness.py DIR [DIR...]   (each DIR holds acquire.lua and release.lua;
a file `lean` in it: send the lean argument lists; a file `bare` in it: the
acquire is `SET key token NX PX`, not a script, and the release script gets
[key] and [token]: the bare lock, whose `SET` the printed EVALSHA time leaves
out).
Environment: PORT (a running server; else one is started from RS,
redis-server), ROUNDS, CYCLES, SCEN, DEBUG."""
import os, re, secrets, socket, subprocess, sys, time, tempfile, statistics

def resp(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)

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
        if t in (b'+', b'-'): return l[1:].decode()
        if t == b':': return int(l[1:])
        if t == b'$':
            n = int(l[1:]); return None if n < 0 else s._n(n).decode()
        if t == b'*':
            n = int(l[1:]); return None if n < 0 else [s.read() for _ in range(n)]
    def cmd(s, *a): s.send(resp(*a)); return s.read()

def evalsha_us(c):
    info = c.cmd('INFO', 'commandstats')
    m = re.search(r'cmdstat_evalsha:calls=(\d+),usec=(\d+)', info)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)

KEYS = 256
token = lambda cl: cl + '-' + secrets.token_hex(8)  # relaylock's: 33 bytes
def run(c, acq, rel, scenario, cycles, lean=False, bare=False):
    key = lambda i: 'p:3:{bench:%d}' % i
    A, B = 'a1b2c3d4e5f60718', '9f8e7d6c5b4a3921'
    # state per key: holder client, holder token
    state = {}
    batch = []
    def ACQ(k, t, cl):
        if bare: return resp('SET', key(k), t, 'NX', 'PX', 30000)
        if lean: return resp('EVALSHA', acq, 1, key(k), t, 30000, cl)
        return resp('EVALSHA', acq, 1, key(k), t, 30000, cl, key(k) + ':ch', 'PUBLISH', 60000)
    def REL(k, t, cl):
        if bare: return resp('EVALSHA', rel, 1, key(k), t)
        if lean: return resp('EVALSHA', rel, 1, key(k), t, 1, cl, 0)
        return resp('EVALSHA', rel, 1, key(k), t, 1, key(k) + ':ch', 60000, 200, cl, 50, 'PUBLISH', 0)
    n_cmds = 0; acqs = 0
    c.cmd('FLUSHALL')
    # warm-up: each key held by A
    for k in range(KEYS):
        t = token(A); state[k] = (A, t)
        c.send(ACQ(k, t, A)); c.read()
    c.cmd('CONFIG', 'RESETSTAT')
    pending = 0
    for cyc in range(cycles):
        for k in range(KEYS):
            h, ht = state[k]
            if scenario == 'uncontended':
                batch.append(REL(k, ht, h)); t = token(h); batch.append(ACQ(k, t, h)); state[k] = (h, t)
            else:
                o = B if h == A else A; t = token(o)
                batch += [ACQ(k, t, o), REL(k, ht, h), ACQ(k, t, o)]; state[k] = (o, t)
            acqs += 1
        data = b''.join(batch); n = len(batch); batch = []
        c.send(data)
        for _ in range(n):
            r = c.read()
            if isinstance(r, str) and r.startswith('ERR'): raise SystemExit(r)
            if os.environ.get('DEBUG') and cyc < 2 and _ < 6: print(scenario, r)
    calls, us = evalsha_us(c)
    # sanity: last replies
    return us / acqs, calls / acqs

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
        shas = {}
        load = lambda f: c.cmd('SCRIPT', 'LOAD', open(f).read()) if os.path.exists(f) else None
        for v in variants:
            shas[v] = (load(v + '/acquire.lua'), load(v + '/release.lua'))
        rounds = int(os.environ.get('ROUNDS', '5')); cycles = int(os.environ.get('CYCLES', '200'))
        res = {}
        scs = os.environ.get('SCEN', 'uncontended,contended').split(',')
        for r in range(rounds):
            for sc in scs:
                for v in variants:
                    us, calls = run(c, *shas[v], sc, cycles, os.path.exists(v + '/lean'), os.path.exists(v + '/bare'))
                    res.setdefault((sc, v), []).append(us)
        for sc in scs:
            for v in variants:
                xs = res[(sc, v)]
                print(f'{sc:12} {v:20} median {statistics.median(xs):6.2f} us/acq  all {" ".join("%.2f" % x for x in xs)}')
    finally:
        c.send(resp('SHUTDOWN', 'NOSAVE')) if not os.environ.get('PORT') else None
main()
