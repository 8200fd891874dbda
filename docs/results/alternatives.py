"""Redis CPU per lock+release pair for protocols relaylock could have used
instead, measured on the server side only (redis_harness.py: pipelined
batches of 64 pairs on random keys of 10,000).

The question: can a lock with server-issued fencing tokens, release replay
detection (the ring) and a last fence that outlives the release (the
tombstone) cost Redis 1.5x the bare lock or less? The lever would be an
acquire without Lua. Each row is the cheapest form of one design; none
parses anything, so relaylock's own version of each would cost more.

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install redis==8.1.0
    /tmp/venv/bin/python docs/results/alternatives.py > docs/results/alternatives.md

Prints a markdown table.
"""

from redis_harness import CAD, print_pairs, redis_server, runs

FENCE = "1798000000000000"

with redis_server() as (r, cpu):
    def multi(p, *commands):
        p.execute_command("MULTI")
        for c in commands:
            p.execute_command(*c)
        p.execute_command("EXEC")

    cad = r.script_load(CAD)
    # Release that deletes the lock and keeps the last fence and the ring in a
    # second name (the tombstone), 60 s.
    DEL_TOMB = r.script_load(
        "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end "
        "local t = redis.call('GET', KEYS[2]) or '' redis.call('DEL', KEYS[1]) "
        "redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. string.sub(t, 1, 527), 'PX', 60000) return 1"
    )
    SETNX_SCRIPT = r.script_load("return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])")

    cases = {
        "bare: SET NX PX; compare-and-delete script": (
            lambda p, k, t: p.set(f"b:{k}", t, nx=True, px=30000),
            lambda p, k, t, a: p.evalsha(cad, 1, f"b:{k}", t),
        ),
        "acquire without Lua, fence from TIME: MULTI SET NX PX GET, TIME, EXEC; compare-and-delete script (no tombstone, no ring)": (
            lambda p, k, t: multi(p, ("SET", f"m:{{{k}}}", t, "NX", "PX", 30000, "GET"), ("TIME",)),
            lambda p, k, t, a: p.evalsha(cad, 1, f"m:{{{k}}}", t),
        ),
        "the same, keeping the last fence and the ring in a tombstone: MULTI SET NX PX GET, GET tombstone, TIME, EXEC; script GET, GET, DEL, SET": (
            lambda p, k, t: multi(p, ("SET", f"t:{{{k}}}", t, "NX", "PX", 30000, "GET"), ("GET", f"t:{{{k}}}:t"), ("TIME",)),
            lambda p, k, t, a: p.evalsha(DEL_TOMB, 2, f"t:{{{k}}}", f"t:{{{k}}}:t", t, FENCE),
        ),
        "SET NX PX and the tombstone-keeping release script (no fence at all)": (
            lambda p, k, t: p.set(f"s:{{{k}}}", t, nx=True, px=30000),
            lambda p, k, t, a: p.evalsha(DEL_TOMB, 2, f"s:{{{k}}}", f"s:{{{k}}}:t", t, FENCE),
        ),
        "an acquire script of one call (SET NX PX); compare-and-delete script": (
            lambda p, k, t: p.evalsha(SETNX_SCRIPT, 1, f"o:{k}", t, 30000),
            lambda p, k, t, a: p.evalsha(cad, 1, f"o:{k}", t),
        ),
    }
    results = runs(r, cpu, cases, 3)
    print_pairs(r, results, "lock + release", next(iter(results)))
