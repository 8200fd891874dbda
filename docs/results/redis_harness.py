"""What alternatives.py runs on: a throwaway redis-server on a free loopback
port with its CPU counter, and the pipelined lock+release measurement.
"""
import contextlib
import random
import statistics
import socket
import subprocess
import time
import uuid

import redis

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
