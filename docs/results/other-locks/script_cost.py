"""Redis CPU per lock+release pair, measured on the server side only.

Starts a redis-server on a free loopback port, sends lock/release pairs in
pipelined batches (64 random keys of 10,000 per batch, so the client's speed
and the network round trips do not matter), and divides the server's
used_cpu_user + used_cpu_sys by the pairs. Compares relaylock's scripts (read
from src/scripts.rs) with the bare lock (SET NX PX, compare-and-delete
script), with the cheapest two scripts that could do relaylock's job
(GET, TIME, SET to acquire; GET, SET to release; no parsing at all), and
with two scripts of a single call each, the floor of any lock that runs a
script to acquire and another to release.

    docs/results/other-locks/.venv/bin/python docs/results/other-locks/script_cost.py

Needs redis-py (run.sh installs it into .venv). Prints a markdown table.
"""

from redis_harness import CAD, ONE_A, ONE_R, lua, print_pairs, redis_server, relaylock_acquire, relaylock_release, runs

with redis_server() as (r, cpu):
    ACQ, REL = r.script_load(lua("ACQUIRE")), r.script_load(lua("RELEASE"))
    cad = r.script_load(CAD)
    FLOOR_A = r.script_load(
        "local v = redis.call('GET', KEYS[1]) local t = redis.call('TIME') "
        "redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t[1] .. t[2] .. '|||', 'PX', ARGV[2]) return {1, 1, 0}"
    )
    FLOOR_R = r.script_load(
        "local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '-' .. ARGV[2] .. '|||', 'PX', 60000) return 1"
    )

    one_a, one_r = r.script_load(ONE_A), r.script_load(ONE_R)

    cases = {
        "relaylock (ACQUIRE + RELEASE)": (
            lambda p, k, t: p.evalsha(ACQ, 3, *sum(relaylock_acquire(k, t), [])),
            lambda p, k, t, a: p.evalsha(REL, 1, *sum(relaylock_release(k, t, a[1]), [])),
        ),
        "two minimal scripts (GET TIME SET; GET SET)": (
            lambda p, k, t: p.evalsha(FLOOR_A, 1, f"f:{{{k}}}", t, 30000),
            lambda p, k, t, a: p.evalsha(FLOOR_R, 1, f"f:{{{k}}}", t, a[1]),
        ),
        "two scripts of one call each (SET PX GET; SET XX PX GET)": (
            lambda p, k, t: p.evalsha(one_a, 1, f"o:{{{k}}}", t, 30000),
            lambda p, k, t, a: p.evalsha(one_r, 1, f"o:{{{k}}}"),
        ),
        "bare (SET NX PX; compare-and-delete script)": (
            lambda p, k, t: p.set(f"b:{k}", t, nx=True, px=30000),
            lambda p, k, t, a: p.evalsha(cad, 1, f"b:{k}", t),
        ),
    }
    results = runs(r, cpu, cases, 3)
    print_pairs(r, results, "pair", "bare (SET NX PX; compare-and-delete script)")
