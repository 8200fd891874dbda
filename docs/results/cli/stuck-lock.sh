#!/usr/bin/env bash
# README "A stuck lock": a `relaylock run` SIGKILLed while holding a 2 h lease,
# then status --held, unlock by token, status --held. Writes to stdout:
#   R=target/debug/relaylock bash docs/results/cli/stuck-lock.sh > docs/results/cli/stuck-lock.txt
set -u
R=${R:-target/release/relaylock}
redis-server --port 6411 --save '' --appendonly no --daemonize yes --dir /tmp --pidfile /tmp/r6411.pid --logfile /tmp/r6411.log
sleep 0.5
export RELAYLOCK_URL=redis://127.0.0.1:6411
$R run --lease 2h nightly-report -- sleep 600 &
RUN=$!
sleep 1.5
kill -9 $RUN
sleep 0.5
T=$($R status --json --held | python3 -c "import json,sys; print(json.load(sys.stdin)['keys'][0]['states'][0]['holders'][0]['token'])")
{
echo '$ relaylock status --held'; $R status --held
echo "\$ relaylock unlock nightly-report --token $T"; $R unlock nightly-report --token $T
echo '$ relaylock status --held'; $R status --held
} 2>&1
redis-cli -p 6411 shutdown nosave >/dev/null
