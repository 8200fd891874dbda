#!/usr/bin/env bash
# What each part of relaylock's client work costs per uncontended acquisition:
# the build before this stop's client work (2a59ea6) against three builds of
# it that each leave one part out (not for use: they measure), alternating,
# four rounds; the bare lock and relaylock in each run, 10,000 keys, 4 x 64
# workers, hold 0, 6 s each.
#   nometrics: every metric record is a no-op (handles from Counter::noop);
#   nowatch:   no lock is given to the watchdog (renew forced off);
#   noclose:   the lock call does not race the shutdown's token.
#   docs/results/fleet/client-cpu/experiments.sh && python3 docs/results/fleet/client-cpu/experiments_summary.py
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
build() { # variant, python edit
  local dir=/tmp/exp-$1
  [ -d "$dir" ] || git -C "$repo" worktree add -f "$dir" 2a59ea6 >/dev/null
  git -C "$dir" checkout -q -- .
  (cd "$dir" && python3 -c "$2")
  (cd "$dir" && CARGO_TARGET_DIR=/tmp/exp-target-$1 cargo build -q --release -j2 -p relaylock-cli)
  cp /tmp/exp-target-$1/release/relaylock /tmp/relaylock-$1
}
build base 'pass'
build nometrics '
p = "src/metrics.rs"; s = open(p).read()
s = s.replace("""    let key = named(key, name);
    metrics::with_recorder(|r| r.register_counter(&key, &METADATA))""", "    let _ = (key, name);\n    Counter::noop()")
s = s.replace("""    let key = named(key, name);
    metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))""", "    let _ = (key, name);\n    Histogram::noop()")
assert s.count("noop()") == 2; open(p, "w").write(s)'
build nowatch '
p = "src/acquire.rs"; s = open(p).read()
a = "renew: options.watchdog.unwrap_or(options.lease.is_none()),"
assert a in s; open(p, "w").write(s.replace(a, a.replace("renew: ", "renew: false && ")))'
build noclose '
p = "src/acquire.rs"; s = open(p).read()
a = """    let outcome = tokio::select! {
        biased;
        _ = inner.closing.cancelled() => Err(Error::Shutdown),
        outcome = call.wait(options) => outcome,
    };"""
assert a in s; open(p, "w").write(s.replace(a, "    let outcome = call.wait(options).await;", 1))'
mkdir -p "$here/experiments"
for round in 1 2 3 4; do
  for b in base nometrics nowatch noclose; do
    /tmp/relaylock-$b bench --keys 10000 --workers 64 --processes 4 --hold-ms 0 --no-rtt \
      --strategy bare:10 --strategy pubsub --duration 6s --json 2>/dev/null > "$here/experiments/$b-$round.jsonl"
  done
done
