"""What the server-side cost scripts share: the Lua of src/scripts.rs, a
throwaway redis-server on a free loopback port with its CPU counter, and the
pipelined lock+release measurement of script_cost.py, release_cost.py and
alternatives.py.
"""
import contextlib
import os
import random
import re
import statistics
import socket
import subprocess
import time
import uuid

import redis

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SRC = open(os.path.join(ROOT, "src", "scripts.rs")).read()


def lua(name):
    """The source of the script `name` of src/scripts.rs (a plain literal)."""
    return re.search(r"pub const " + name + r': &str = r#"(.*?)"#;', SRC, re.S).group(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@contextlib.contextmanager
def redis_server():
    """A redis-server without persistence, stopped at the end; yields a
    redis-py client and `cpu()`, the server's user + system CPU seconds."""
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)

        def cpu():
            i = r.info("cpu")
            return i["used_cpu_user"] + i["used_cpu_sys"]

        yield r, cpu
    finally:
        server.terminate()
        server.wait()


# The bare lock's release: the seeds' compare-and-delete script.
CAD = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end"

# The cheapest any lock that runs one script to acquire and one to release
# could be: each script makes a single call (SET ... GET), with no parsing.
ONE_A = "return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'GET')"
ONE_R = "return redis.call('SET', KEYS[1], '-', 'XX', 'PX', 60000, 'GET')"


def relaylock_name(k):
    """The value's name of key number `k` (prefix `p`, protocol 2)."""
    return f"p:2:{{{k}}}"


def relaylock_acquire(k, t):
    """The KEYS and ARGV of relaylock's ACQUIRE for key number `k` and token
    `t`: a 30 s lease, a caller that will not wait."""
    name = relaylock_name(k)
    return [name, f"{name}:void:{t}", f"{name}:void"], [t, 30000, "", f"{name}:ch", "PUBLISH"]


def relaylock_release(k, t, fence):
    """The KEYS and ARGV of relaylock's RELEASE as relaylock sends a release
    that knows its fence: the lock's name alone."""
    name = relaylock_name(k)
    return [name], [t, fence, f"{name}:ch", 60000, 544, "c", 50, "PUBLISH", "0"]


# Pairs are sent in pipelined batches of BATCH random keys of KEYS, ROUNDS
# batches per measurement.
KEYS, BATCH, ROUNDS = 10_000, 64, 400


def pairs(r, cpu, acquire, release):
    """Server CPU µs per lock+release pair: `acquire(p, k, t)` and
    `release(p, k, t, reply)` queue one call each on the pipeline `p` for key
    number `k` and a fresh token `t`; `reply` is the acquire's."""
    used = 0.0
    for _ in range(ROUNDS):
        keys = random.sample(range(KEYS), BATCH)
        toks = [str(uuid.uuid4()) for _ in keys]
        p = r.pipeline(transaction=False)
        for k, t in zip(keys, toks):
            acquire(p, k, t)
        c0 = cpu()
        replies = p.execute()
        p = r.pipeline(transaction=False)
        for k, t, a in zip(keys, toks, replies):
            release(p, k, t, a)
        p.execute()
        used += cpu() - c0
    return 1e6 * used / (ROUNDS * BATCH)


def runs(r, cpu, cases, n):
    """`{label: (acquire, release)}` measured `n` times, the cases taking
    turns: `{label: [µs per pair, one per run]}`."""
    results = {label: [] for label in cases}
    for _ in range(n):
        for label, (acquire, release) in cases.items():
            results[label].append(pairs(r, cpu, acquire, release))
    return results


def print_pairs(r, results, what, bare):
    """Print `runs`' results as a markdown table whose first column is
    headed `what`, with each median against the median of `results[bare]`."""
    n = len(next(iter(results.values())))
    base = statistics.median(results[bare])
    print(f"redis-server {r.info('server')['redis_version']}, {BATCH} pairs per pipelined batch, {ROUNDS} batches, {n} runs each")
    print()
    print(f"| {what} | Redis CPU µs per pair ({n} runs) | median | × bare |")
    print("|---|---|---:|---:|")
    for label, v in results.items():
        m = statistics.median(v)
        print(f"| {label} | {', '.join(f'{x:.2f}' for x in v)} | {m:.2f} | {m / base:.2f} |")
