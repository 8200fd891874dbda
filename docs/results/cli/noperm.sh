#!/usr/bin/env bash
# docs/operations.md, `relaylock status` without a permission: an ACL user
# lacking HGETALL on a server at port 16400, a lock held on orders:42.
#   R=target/debug/relaylock bash docs/results/cli/noperm.sh > docs/results/cli/noperm.txt
set -u
R=${R:-target/release/relaylock}
redis-server --port 16400 --save '' --appendonly no --daemonize yes --dir /tmp --pidfile /tmp/r16400.pid --logfile /tmp/r16400.log
sleep 0.5
redis-cli -p 16400 ACL SETUSER ops on '>pw' resetkeys '%R~relaylock:*' resetchannels -@all \
  +get +pttl +zrange +time '+pubsub|numsub' '+pubsub|shardnumsub' +scan +ping +info '+client|id' '+cluster|slots' >/dev/null
RELAYLOCK_URL=redis://127.0.0.1:16400 $R run orders:42 -- sleep 3 &
sleep 1
echo '$ relaylock status --url redis://ops:pw@127.0.0.1:16400 orders:42; echo "exit status: $?"'
$R status --url redis://ops:pw@127.0.0.1:16400 orders:42 2>&1; echo "exit status: $?"
wait
redis-cli -p 16400 shutdown nosave >/dev/null
