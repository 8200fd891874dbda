"""Redis CPU per call when Redis is woken for each call, as under contention.

Under contention a lock's requests reach Redis one at a time, about 2 ms
apart (the hold), so Redis sleeps between them and runs each one cold.
script_cost.py measures pipelined batches (hot). This sends one call, waits
2 ms, and repeats, 1000 times per variant and twice, and divides the
server's used_cpu_user + used_cpu_sys by the calls: a PING, scripts that do
ever more of relaylock's release (with a contended value: a 32-fence ring),
and relaylock's own RELEASE handing the lock to the next token each time
(read from src/scripts.rs), which is a contended acquisition's only call.

    docs/results/other-locks/.venv/bin/python docs/results/other-locks/cold_cost.py

Needs redis-py (run.sh installs it into .venv). Prints a markdown table.
"""
import time
import uuid

from redis_harness import lua, redis_server

CALLS, GAP = 1000, 0.002
with redis_server() as (r, cpu):
    L = "p:2:{k}"
    ring = " ".join(str(1800000000000000 + i) for i in range(32))
    value = "tok:1800000000000099|c1|" + ring + "|"
    parse = """local v=redis.call('GET',KEYS[1])
local a = string.find(v, '|', 1, true)
local b = a and string.find(v, '|', a + 1, true)
local c = b and string.find(v, '|', b + 1, true)
local head, queue, ring, void = string.sub(v, 1, a - 1), string.sub(v, a + 1, b - 1), string.sub(v, b + 1, c - 1), string.sub(v, c + 1)
"""
    variants = [
        ("EVALSHA `return 1`", "return 1"),
        ("GET", "redis.call('GET',KEYS[1]) return 1"),
        ("GET TIME SET", "local v=redis.call('GET',KEYS[1]) redis.call('TIME') redis.call('SET',KEYS[1],v,'PX',10000) return 1"),
        ("GET, parse the value, TIME, SET", parse + "redis.call('TIME') redis.call('SET',KEYS[1],head..'|'..queue..'|'..ring..'|'..void,'PX',10000) return 1"),
        ("the same, plus the ring's prepend and cut", parse + """local fence='1800000000000099'
ring = fence .. ' ' .. ring
if #ring > 544 then ring = string.match(string.sub(ring, 1, 545), '^(.*) ') or fence end
redis.call('TIME') redis.call('SET',KEYS[1],head..'|'..queue..'|'..ring..'|'..void,'PX',10000) return 1"""),
    ]
    args = ["a" * 36, 1800000000000099, "ch", 60000, 544, "c1", 50, "PUBLISH", "1", "b" * 36, 10000, "1"]
    keys = [L, L + ":void:x", L + ":void", L + ":void:y"]

    def spaced(call):
        out = []
        for _ in range(2):
            t0 = cpu()
            for _ in range(CALLS):
                call()
                time.sleep(GAP)
            out.append((cpu() - t0) * 1e6 / CALLS)
        return out

    rows = [("PING", spaced(r.ping))]
    for name, src in variants:
        r.set(L, value)
        sha = r.script_load(src)
        rows.append((name, spaced(lambda: r.evalsha(sha, len(keys), *keys, *args))))
    # relaylock's RELEASE, each call handing the lock to a new token.
    r.delete(L)
    acq, rel = r.script_load(lua("ACQUIRE")), r.script_load(lua("RELEASE"))
    state = {"tok": str(uuid.uuid4())}
    state["fence"] = r.evalsha(acq, 3, L, L + ":void:" + state["tok"], L + ":void", state["tok"], 10000, "c1", "ch", "PUBLISH")[1]

    def handover():
        nxt = str(uuid.uuid4())
        reply = r.evalsha(rel, 4, L, L + ":void:" + state["tok"], L + ":void", L + ":void:" + nxt,
                          state["tok"], state["fence"], "ch", 60000, 544, "c1", 50, "PUBLISH", "1", nxt, 10000, "1")
        assert reply[0] == 4, reply
        state["tok"], state["fence"] = nxt, reply[1]

    rows.append(("relaylock RELEASE handing the lock over (a contended acquisition)", spaced(handover)))
    print(f"redis-server {r.info('server')['redis_version']}, one call every {GAP * 1000:.0f} ms, {CALLS} calls, 2 runs each")
    print()
    print("| call | Redis CPU µs per call (2 runs) |")
    print("|---|---|")
    for name, v in rows:
        print(f"| {name} | {', '.join(f'{x:.1f}' for x in v)} |")
