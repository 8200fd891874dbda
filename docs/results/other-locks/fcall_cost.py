"""Redis CPU per lock+release pair, EVALSHA against FCALL (Redis Functions).

The same Lua bodies, once sent as scripts (EVALSHA) and once loaded as one
function library (FUNCTION LOAD, then FCALL), in pipelined batches as
script_cost.py measures: relaylock's ACQUIRE and RELEASE of src/scripts.rs,
the two scripts of one call each, and the bare lock as the reference.

    docs/results/other-locks/.venv/bin/python docs/results/other-locks/fcall_cost.py

Needs redis-py (run.sh installs it into .venv). Prints a markdown table.
"""

from redis_harness import CAD, ONE_A, ONE_R, lua, print_pairs, redis_server, relaylock_acquire, relaylock_release, runs


def library(bodies):
    """One function library holding each body as the function of its name;
    the body sees its keys and arguments as KEYS and ARGV, as a script does."""
    out = ["#!lua name=relaylock_cost"]
    for fname, body in bodies.items():
        out.append(f"redis.register_function('{fname}', function(KEYS, ARGV)\n{body}\nend)")
    return "\n".join(out)


with redis_server() as (r, cpu):
    bodies = {"acq": lua("ACQUIRE"), "rel": lua("RELEASE"), "one_a": ONE_A, "one_r": ONE_R, "cad": CAD}
    r.function_load(library(bodies), replace=True)
    sha = {f: r.script_load(b) for f, b in bodies.items()}

    def acq_args(k, t):
        return sum(relaylock_acquire(k, t), [])

    def rel_args(k, t, a):
        return sum(relaylock_release(k, t, a[1]), [])

    cases = {
        "relaylock, EVALSHA": (
            lambda p, k, t: p.evalsha(sha["acq"], 3, *acq_args(k, t)),
            lambda p, k, t, a: p.evalsha(sha["rel"], 1, *rel_args(k, t, a)),
        ),
        "relaylock, FCALL": (
            lambda p, k, t: p.fcall("acq", 3, *acq_args(k, t)),
            lambda p, k, t, a: p.fcall("rel", 1, *rel_args(k, t, a)),
        ),
        "one call each, EVALSHA": (
            lambda p, k, t: p.evalsha(sha["one_a"], 1, f"o:{{{k}}}", t, 30000),
            lambda p, k, t, a: p.evalsha(sha["one_r"], 1, f"o:{{{k}}}"),
        ),
        "one call each, FCALL": (
            lambda p, k, t: p.fcall("one_a", 1, f"f:{{{k}}}", t, 30000),
            lambda p, k, t, a: p.fcall("one_r", 1, f"f:{{{k}}}"),
        ),
        "bare, release by EVALSHA": (
            lambda p, k, t: p.set(f"b:{k}", t, nx=True, px=30000),
            lambda p, k, t, a: p.evalsha(sha["cad"], 1, f"b:{k}", t),
        ),
        "bare, release by FCALL": (
            lambda p, k, t: p.set(f"c:{k}", t, nx=True, px=30000),
            lambda p, k, t, a: p.fcall("cad", 1, f"c:{k}", t),
        ),
    }
    results = runs(r, cpu, cases, 3)
    print_pairs(r, results, "pair", "bare, release by EVALSHA")
