"""python-redis-lock under contention: --workers threads in one process take
one key in a loop (acquire, hold --hold-ms, release) for --duration-s, and
the program prints one JSON line (same fields as the other load programs of
this folder, see README.md).

    .venv/bin/python redis_lock_load.py --url redis://127.0.0.1:6379

The library is synchronous (no asyncio variant), so each worker is a thread
with its own Lock object per round, sharing one redis.Redis client (and so
one connection pool). Waiting is the library's own: acquire() checks that
this Lock object does not hold the key (GET), tries SET NX EX, and on
failure blocks in BLPOP on the key's signal list (timeout: the lock's expire)
until a release pushes one element there, then tries SET NX again.
"""

import argparse
import json
import math
import os
import resource
import sys
import threading
import time
from importlib.metadata import version

import redis
import redis_lock

p = argparse.ArgumentParser()
p.add_argument("--url", default="redis://127.0.0.1:6379")
p.add_argument("--workers", type=int, default=256)
p.add_argument("--hold-ms", type=float, default=1.0)
p.add_argument("--duration-s", type=float, default=6.0)
p.add_argument("--lease-s", type=int, default=10)
# redis-py 8 caps a pool at 100 connections by default, and every waiting
# worker holds one (BLPOP): the pool gets one per worker.
p.add_argument("--max-connections", type=int, default=0, help="default: --workers")
a = p.parse_args()

client = redis.Redis.from_url(a.url, max_connections=a.max_connections or a.workers)
admin = redis.Redis.from_url(a.url)
key = f"redis-lock-load-{os.getpid()}"

counts = [0] * a.workers
waits = []
holds = []
inside = 0
violations = 0
errors = 0
first_error = None
guard = threading.Lock()  # protects `inside` and the error counters
go = threading.Event()
deadline = math.inf


def worker(i):
    global inside, violations, errors, first_error
    go.wait()
    while time.perf_counter() < deadline:
        lock = redis_lock.Lock(client, key, expire=a.lease_s)
        t_call = time.perf_counter()
        try:
            lock.acquire()  # blocking=True, timeout=None: the library's default
        except Exception as e:
            with guard:
                errors += 1
                first_error = first_error or repr(e)
            time.sleep(0.01)
            continue
        t_acq = time.perf_counter()
        with guard:
            if inside != 0:
                violations += 1
            inside += 1
        if t_acq <= deadline:  # only acquisitions within the timed phase count
            counts[i] += 1
            waits.append((t_acq - t_call) * 1e3)
        time.sleep(a.hold_ms / 1e3)
        with guard:
            inside -= 1
        if t_acq <= deadline:
            holds.append((time.perf_counter() - t_acq) * 1e3)
        try:
            lock.release()
        except Exception as e:
            with guard:
                errors += 1
                first_error = first_error or repr(e)


def percentile(s, q):
    if not s:
        return None
    return s[min(max(math.ceil(q / 100 * len(s)), 1), len(s)) - 1]


def jain(c):
    sq = sum(x * x for x in c)
    return sum(c) ** 2 / (len(c) * sq) if sq else 0.0


def cpu_s():
    info = admin.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


# Warm-up outside the timed phase: open the pool's connections (a BLPOP
# holds its connection) and load the unlock script.
pool = client.connection_pool
conns = [pool.get_connection() for _ in range(min(a.workers, pool.max_connections))]
for c in conns:
    pool.release(c)
w = redis_lock.Lock(client, key, expire=a.lease_s)
w.acquire()
w.release()

threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(a.workers)]
for t in threads:
    t.start()
cpu0 = cpu_s()
admin.config_resetstat()
start = time.perf_counter()
deadline = start + a.duration_s
go.set()
time.sleep(max(0.0, deadline - time.perf_counter()))
stats = admin.info("commandstats")
cpu_us = (cpu_s() - cpu0) * 1e6
elapsed = time.perf_counter() - start

calls = {
    k.removeprefix("cmdstat_"): v["calls"]
    for k, v in stats.items()
    if not k.removeprefix("cmdstat_").startswith(("info", "config"))
}
# Sent by the client: SET NX, BLPOP, EVALSHA (SCRIPT LOAD on NOSCRIPT) and
# acquire()'s GET. The unlock script runs one GET per call (then DEL, LPUSH,
# PEXPIRE, DEL), so the client's GETs are the GETs beyond the script calls.
scripts = calls.get("evalsha", 0) + calls.get("eval", 0)
requests = (
    calls.get("set", 0)
    + calls.get("blpop", 0)
    + scripts
    + sum(n for c, n in calls.items() if c.startswith("script"))
    + max(0, calls.get("get", 0) - scripts)
)
commands = sum(calls.values())
snapshot = list(counts)
w_sorted = sorted(waits)
acq = len(w_sorted)
per_acq = (lambda x: x / acq) if acq else (lambda x: None)
print(
    json.dumps(
        {
            "lock": f"python-redis-lock {version('python-redis-lock')} (Python {sys.version.split()[0]}, redis-py {redis.__version__}, threads)",
            "strategy": "SET NX, then BLPOP on a signal list pushed by release (default)",
            "workers": a.workers,
            "processes": 1,
            "keys": 1,
            "hold_ms": a.hold_ms,
            "lease_s": a.lease_s,
            "duration_s": elapsed,
            "acquisitions": acq,
            "acq_per_s": acq / elapsed,
            "wait_p50_ms": percentile(w_sorted, 50),
            "wait_p99_ms": percentile(w_sorted, 99),
            "wait_max_ms": percentile(w_sorted, 100),
            "hold_p50_ms": percentile(sorted(holds), 50),
            "redis_requests_per_acq": per_acq(requests),
            "redis_cmds_per_acq": per_acq(commands),
            "redis_cpu_us_per_acq": per_acq(cpu_us),
            "jain_fairness": jain(snapshot),
            "workers_with_acq": sum(1 for c in snapshot if c > 0),
            "violations": violations,
            "errors": errors,
            "first_error": first_error,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "redis_calls": calls,
        }
    ),
    flush=True,
)
# Threads still waiting are abandoned (daemon threads); the key expires with
# its lease.
admin.delete("lock:" + key, "lock-signal:" + key)
os._exit(0)
