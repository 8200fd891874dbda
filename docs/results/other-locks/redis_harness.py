"""What script_cost.py and cold_cost.py share: the Lua of src/scripts.rs,
and a throwaway redis-server on a free loopback port with its CPU counter.
"""
import contextlib
import os
import re
import socket
import subprocess
import time

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
