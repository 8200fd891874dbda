"""One scenario of docs/results/fleet/tries/run.sh: the bench's line and the
workers' summed try counts (TRYSTATS, see tries.patch), per acquisition.

    python3 summary.py <label> <bench stdout> <bench stderr>
"""
import sys

label, out, err = sys.argv[1:4]
line = [l for l in open(out) if l.startswith("pubsub")][-1].split()
acq = int(line[3])
t = [0] * 16
for l in open(err):
    if l.startswith("TRYSTATS "):
        t = [a + b for a, b in zip(t, eval(l.split(" ", 1)[1]))]
calls = sum(t[:14])
names = [
    ("first try, took", 0), ("first try, refused (key held or reserved)", 1),
    ("after confirming the subscription, took", 2), ("after confirming the subscription, refused", 3),
    ("queued newcomer's probe, took", 4), ("queued newcomer's probe, refused", 5),
    ("woken by a message, took", 6), ("woken by a message, refused", 7),
    ("lease ran out, took", 8), ("lease ran out, refused", 9),
    ("after a reconnect, took", 10), ("after a reconnect, refused", 11),
]
print(f"{label}: {acq} acquisitions, {calls} acquire calls ({calls / acq:.3f} per acquisition)")
for name, i in names:
    if t[i]:
        print(f"  {name:45} {t[i]:8}  {t[i] / acq:.4f}/acq")
grants = t[14] + t[15]
print(f"  {'granted in-process by a local release (no call)':45} {grants:8}  {grants / acq:.4f}/acq")
