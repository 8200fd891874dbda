"""Redis CPU per lock+release pair when one script call carries several
acquisitions (and one call their releases), against one call each.

The question: is the cost of relaylock's scripts the call (EVALSHA's own
work, paid once per call) or the script's body (paid per key)? If it were
the call, a client could gather the acquisitions its tasks start at the same
moment into one call. Each batched script runs relaylock's ACQUIRE or RELEASE
body (src/scripts.rs) once per key, as a local function. Pipelined batches of
64 pairs as script_cost.py sends them; bare lock for reference.

    docs/results/other-locks/.venv/bin/python docs/results/other-locks/batch_cost.py

Needs redis-py (run.sh installs it into .venv). Prints a markdown table.
"""
import random
import uuid

import redis_harness as h
from redis_harness import CAD, lua, print_pairs, redis_server, relaylock_acquire, relaylock_release


def many(body, nkeys, nargs):
    """A script running `body` once per group of `nkeys` keys and `nargs`
    arguments, replying with the list of the bodies' replies."""
    return (
        f"local function one(KEYS, ARGV)\n{body}\nend\n"
        "local out = {}\n"
        f"for i = 0, #KEYS / {nkeys} - 1 do\n"
        "  local K, A = {}, {}\n"
        f"  for j = 1, {nkeys} do K[j] = KEYS[i * {nkeys} + j] end\n"
        f"  for j = 1, {nargs} do A[j] = ARGV[i * {nargs} + j] end\n"
        "  out[i + 1] = one(K, A)\n"
        "end\nreturn out\n"
    )


def batched(r, cpu, acq, rel, n):
    """Server CPU µs per pair, `n` acquisitions per ACQUIRE call and `n`
    releases per RELEASE call (as redis_harness.pairs measures)."""
    used = 0.0
    for _ in range(h.ROUNDS):
        keys = random.sample(range(h.KEYS), h.BATCH)
        toks = [str(uuid.uuid4()) for _ in keys]
        groups = [list(range(g, min(g + n, h.BATCH))) for g in range(0, h.BATCH, n)]
        p = r.pipeline(transaction=False)
        for grp in groups:
            ks, args = [], []
            for i in grp:
                a, b = relaylock_acquire(keys[i], toks[i])
                ks += a
                args += b
            p.evalsha(acq, len(ks), *ks, *args)
        c0 = cpu()
        replies = [x for group in p.execute() for x in group]
        assert all(x[0] == 1 for x in replies), "every acquisition succeeds"
        p = r.pipeline(transaction=False)
        for grp in groups:
            ks, args = [], []
            for i in grp:
                a, b = relaylock_release(keys[i], toks[i], replies[i][1])
                ks += a
                args += b
            p.evalsha(rel, len(ks), *ks, *args)
        p.execute()
        used += cpu() - c0
    return 1e6 * used / (h.ROUNDS * h.BATCH)


with redis_server() as (r, cpu):
    ACQ, REL = r.script_load(lua("ACQUIRE")), r.script_load(lua("RELEASE"))
    ACQM, RELM = r.script_load(many(lua("ACQUIRE"), 3, 5)), r.script_load(many(lua("RELEASE"), 1, 9))
    cad = r.script_load(CAD)
    one = (
        lambda p, k, t: p.evalsha(ACQ, 3, *sum(relaylock_acquire(k, t), [])),
        lambda p, k, t, a: p.evalsha(REL, 1, *sum(relaylock_release(k, t, a[1]), [])),
    )
    bare = (
        lambda p, k, t: p.set(f"b:{k}", t, nx=True, px=30000),
        lambda p, k, t, a: p.evalsha(cad, 1, f"b:{k}", t),
    )
    labels = ["relaylock ACQUIRE, RELEASE: one call per acquisition"] + [f"the same bodies batched: {n} per call" for n in (1, 4, 16, 64)]
    labels.append("bare (SET NX PX; compare-and-delete script)")
    results = {label: [] for label in labels}
    for _ in range(3):
        results[labels[0]].append(h.pairs(r, cpu, *one))
        for label, n in zip(labels[1:5], (1, 4, 16, 64)):
            results[label].append(batched(r, cpu, ACQM, RELM, n))
        results[labels[-1]].append(h.pairs(r, cpu, *bare))
    print_pairs(r, results, "pair", labels[-1])
