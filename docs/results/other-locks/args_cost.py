"""Redis CPU per script call against the number of KEYS and ARGV it is sent,
measured on the server side only (pipelined batches of 64 calls, random keys
of 10,000): `return 1` and a single GET, with 1 key and 2 arguments, and with
RELEASE's full arity (4 keys, 12 arguments, its real name lengths).

    docs/results/other-locks/.venv/bin/python docs/results/other-locks/args_cost.py

Prints a markdown table.
"""
import random
import statistics
import uuid

from redis_harness import redis_server

with redis_server() as (r, cpu):
    BATCH, ROUNDS = 64, 400

    def calls(send):
        used = 0.0
        for _ in range(ROUNDS):
            p = r.pipeline(transaction=False)
            for _ in range(BATCH):
                send(p, random.randrange(10_000))
            c0 = cpu()
            p.execute()
            used += cpu() - c0
        return 1e6 * used / (BATCH * ROUNDS)

    token = str(uuid.uuid4())

    def full(k):
        n = f"relaylock:2:{{{k}}}"
        keys = [n, f"{n}:void:{token}", f"{n}:void", f"{n}:void:{token}"]
        args = [token, "1798000000000000", f"{n}:ch", "60000", "544", "0123456789abcdef", "50", "PUBLISH", "0", "", "30000", "0"]
        return keys, args

    def lean(k):
        keys, args = full(k)
        return keys[:1], args[:2]

    cases = {}
    for body, label in (("return 1", "`return 1`"), ("return redis.call('GET', KEYS[1])", "a single `GET`")):
        sha = r.script_load(body)
        for shape, what in ((lean, "1 key, 2 arguments"), (full, "4 keys, 12 arguments")):
            cases[f"{label}, {what}"] = (lambda sha, shape: lambda p, k: p.evalsha(sha, len(shape(k)[0]), *shape(k)[0], *shape(k)[1]))(sha, shape)
    results = {label: [] for label in cases}
    for _ in range(3):
        for label, send in cases.items():
            results[label].append(calls(send))
    print(f"redis-server {r.info('server')['redis_version']}, {BATCH} calls per pipelined batch, {ROUNDS} batches, 3 runs each")
    print()
    print("| script, sent with | Redis CPU µs per call (3 runs) | median |")
    print("|---|---|---:|")
    for label, v in results.items():
        print(f"| {label} | {', '.join(f'{x:.2f}' for x in v)} | {statistics.median(v):.2f} |")
