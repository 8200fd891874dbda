"""Rules shared by the targets tables (targets.py, fleet/kept/kept.py)."""


def contended(target, label, r):
    """The contended-lock targets of one bench row, through `target(what, measured, ok)`."""
    target(f"{label}: commands/acq ≤ 10", f"{r['redis_cmds_per_acq']:.2f}", r["redis_cmds_per_acq"] <= 10)
    target(
        f"{label}: ≤ 1.0 attempts and ≤ 2.0 requests per acq",
        f"{r['attempts_per_acq']:.3f} and {r['redis_requests_per_acq']:.3f}",
        r["attempts_per_acq"] <= 1.01 and r["redis_requests_per_acq"] <= 2.02,
    )
    target(
        f"{label}: Jain ≥ 0.99, 0 violations",
        f"{r['jain_fairness']:.3f}, {r['violations']}",
        r["jain_fairness"] >= 0.99 and r["violations"] == 0,
    )
