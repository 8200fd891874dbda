//! Redis Cluster with sharded pub/sub, against a real cluster of
//! redis-server processes started by the test support code.

use relaylock_testkit as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use fred::util::redis_keyslot;
use relaylock::{LockClient, LockOptions};
use support::cluster::RedisCluster;
use support::{command_calls, delta, eventually, Admin};

async fn lock_client(cluster: &RedisCluster, lease: Duration) -> LockClient {
    support::preset(&cluster.url())
        .default_lease(lease)
        .command_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("connect to the cluster")
}

/// A plain fred cluster client, for the guarded counters.
async fn data_client(cluster: &RedisCluster) -> Client {
    let client = Builder::from_config(Config::from_url(&cluster.url()).unwrap())
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(5))
        .build()
        .unwrap();
    client.init().await.unwrap();
    client
}

/// The port of the primary that owns `slot`, from `CLUSTER SLOTS`.
async fn owner_port(admin: &Client, slot: u16) -> u16 {
    let slots: Vec<Value> = admin
        .custom(
            CustomCommand::new_static("CLUSTER", None, false),
            vec!["SLOTS"],
        )
        .await
        .unwrap();
    for range in slots {
        let r = range.into_array();
        let (from, to) = (r[0].as_i64().unwrap(), r[1].as_i64().unwrap());
        if (from..=to).contains(&i64::from(slot)) {
            let primary = r[2].clone().into_array();
            return primary[1].as_i64().unwrap() as u16;
        }
    }
    panic!("no node owns slot {slot}");
}

/// Many tasks in two clients over keys spread across all shards: a
/// non-atomic counter per key under the lock stays exact, and fencing tokens
/// increase per key in critical-section order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_shards() {
    let cluster = RedisCluster::start(3, 0);
    let a = lock_client(&cluster, Duration::from_secs(5)).await;
    // The second client from a fred configuration instead of a URL.
    let b = client_from_fred_config(&cluster).await;
    let data = data_client(&cluster).await;
    let keys: Vec<String> = (0..24).map(|i| format!("acct:{i}")).collect();
    let admin = cluster.nodes[0].admin().await;
    let mut owners = std::collections::HashSet::new();
    for k in &keys {
        owners.insert(owner_port(&admin, redis_keyslot(a.redis_key(k).as_bytes())).await);
    }
    assert_eq!(owners.len(), 3, "the keys do not cover every shard");

    let fences: Arc<Mutex<HashMap<String, Vec<u64>>>> = Arc::default();
    let until = Instant::now() + Duration::from_secs(3);
    let mut tasks = Vec::new();
    for (i, lock) in (0..32).map(|i| (i, if i % 2 == 0 { a.clone() } else { b.clone() })) {
        let (keys, data, fences) = (keys.clone(), data.clone(), Arc::clone(&fences));
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut j = i;
            while Instant::now() < until {
                let key = &keys[j % keys.len()];
                j += 7;
                let g = lock.lock(key).await.unwrap();
                let counter = format!("count:{{{}}}", key);
                let v: Option<i64> = data.get(&counter).await.unwrap();
                tokio::task::yield_now().await;
                let _: () = data
                    .set(&counter, v.unwrap_or(0) + 1, None, None, false)
                    .await
                    .unwrap();
                fences
                    .lock()
                    .unwrap()
                    .entry(key.clone())
                    .or_default()
                    .push(g.fencing_token());
                g.release().await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a task is stuck")
            .unwrap();
    }
    let mut counted = 0;
    for k in &keys {
        let v: Option<i64> = data.get(format!("count:{{{k}}}")).await.unwrap();
        counted += v.unwrap_or(0) as u64;
    }
    println!(
        "cluster: {total} acquisitions over {} keys on 3 shards",
        keys.len()
    );
    assert_eq!(counted, total, "lost updates: mutual exclusion broken");
    for (k, f) in fences.lock().unwrap().iter() {
        assert!(
            f.windows(2).all(|w| w[0] < w[1]),
            "{k}: fences not increasing"
        );
    }
}

/// A client of `cluster` built from a fred configuration (its nodes), with
/// a 5 s lease.
async fn client_from_fred_config(cluster: &RedisCluster) -> LockClient {
    let nodes: Vec<(&str, u16)> = cluster
        .nodes
        .iter()
        .map(|n| ("127.0.0.1", n.port))
        .collect();
    LockClient::builder()
        .fred_config(fred::types::config::Config {
            server: fred::types::config::ServerConfig::new_clustered(nodes),
            ..Default::default()
        })
        .default_lease(Duration::from_secs(5))
        .build()
        .await
        .expect("connect with a fred config")
}

/// A release publishes with SPUBLISH on the lock's own shard only: the
/// waiter wakes at once, the subscription exists only on that shard's
/// primary, and no other node executes a publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_message_stays_in_its_shard() {
    let cluster = RedisCluster::start(3, 0);
    let lock = lock_client(&cluster, Duration::from_secs(30)).await;
    let other = lock_client(&cluster, Duration::from_secs(30)).await;
    let mut admins = HashMap::new();
    for n in &cluster.nodes {
        admins.insert(n.port, n.admin().await);
    }
    let key = "orders:7";
    // The waiter's own channel of the lock (protocol 3).
    let channel = format!("{}:ch:{}", lock.redis_key(key), other.client_id());
    let owner = owner_port(
        &admins[&cluster.nodes[0].port],
        redis_keyslot(channel.as_bytes()),
    )
    .await;

    let g = lock.lock(key).await.unwrap();
    let waiter = support::spawn_waiter(&other, key);
    // The waiter's sharded subscription lives on the owner only.
    let shardnumsub = |admin: Client, channel: String| async move {
        let v: Vec<Value> = admin
            .custom(
                CustomCommand::new_static("PUBSUB", None, false),
                vec!["SHARDNUMSUB".to_owned(), channel],
            )
            .await
            .unwrap();
        v[1].as_i64().unwrap()
    };
    assert!(
        eventually(Duration::from_secs(3), || {
            let (admin, channel) = (admins[&owner].clone(), channel.clone());
            async move { shardnumsub(admin, channel).await == 1 }
        })
        .await
    );
    for (port, admin) in &admins {
        let n = shardnumsub(admin.clone(), channel.clone()).await;
        assert_eq!(
            n,
            i64::from(*port == owner),
            "node {port}: {n} shard subscribers"
        );
    }
    let mut before = HashMap::new();
    for (port, admin) in &admins {
        before.insert(*port, command_calls(admin).await);
    }
    let released = Instant::now();
    g.release().await.unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is stuck")
        .unwrap();
    let took = woke - released;
    println!("cluster: the waiter acquired {took:?} after the release (lease 30 s)");
    assert!(
        took < Duration::from_millis(500),
        "not woken by the release message: {took:?}"
    );
    for (port, admin) in &admins {
        let after = command_calls(admin).await;
        let spublish = delta(&before[port], &after, "spublish");
        let publish = delta(&before[port], &after, "publish");
        println!("node {port}: spublish {spublish}, publish {publish}");
        assert_eq!(publish, 0, "node {port} ran a cluster-wide PUBLISH");
        if *port == owner {
            assert!(spublish >= 1, "the owner did not publish");
        } else {
            assert_eq!(spublish, 0, "node {port} saw the shard's message");
        }
    }
}

/// A manual `CLUSTER FAILOVER` of the shard that holds the hottest keys,
/// during contention: every waiter acquires, and once the replica has taken
/// over, nobody waits longer than a lease (while the shard fails over, its
/// commands time out and callers retry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_during_contention_loses_no_waiter() {
    let cluster = RedisCluster::start(3, 1);
    let lease = Duration::from_secs(2);
    let lock = lock_client(&cluster, lease).await;
    let data = data_client(&cluster).await;
    let keys: Vec<String> = (0..6).map(|i| format!("hot:{i}")).collect();
    let admin = cluster.nodes[0].admin().await;
    let owner = owner_port(&admin, redis_keyslot(lock.redis_key(&keys[0]).as_bytes())).await;
    let replica = cluster.replica_of(owner).expect("the owner has a replica");

    let until = Instant::now() + Duration::from_secs(5);
    let waits: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let (lock, keys, data, waits) =
            (lock.clone(), keys.clone(), data.clone(), Arc::clone(&waits));
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < until {
                let key = &keys[(i + n as usize) % keys.len()];
                let started = Instant::now();
                let g = loop {
                    match lock.lock_with(key, LockOptions::default()).await {
                        Ok(g) => break g,
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                };
                waits.lock().unwrap().push((started, Instant::now()));
                let counter = format!("count:{{{key}}}");
                let v: Option<i64> = data.get(&counter).await.unwrap_or(None);
                let _: Result<(), _> = data
                    .set(&counter, v.unwrap_or(0) + 1, None, None, false)
                    .await;
                let _ = g.release().await;
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let replica_admin = replica.admin().await;
    let began = Instant::now();
    let _: Value = replica_admin
        .custom(
            CustomCommand::new_static("CLUSTER", None, false),
            vec!["FAILOVER"],
        )
        .await
        .unwrap();
    let failed_over = eventually(Duration::from_secs(10), || async {
        replica.info_has("replication", "role:master")
    })
    .await;
    assert!(failed_over, "the replica did not take over");
    let done = Instant::now();
    let mut total = 0;
    for t in tasks {
        total += tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a waiter is stuck")
            .unwrap();
    }
    let waits = waits.lock().unwrap();
    let longest = waits.iter().map(|(s, e)| *e - *s).max().unwrap();
    // How long after the failover completed a wait that began before it
    // still went on.
    let past = waits
        .iter()
        .filter(|(start, _)| *start < done)
        .map(|(_, end)| end.saturating_duration_since(done))
        .max()
        .unwrap_or_default();
    println!(
        "cluster failover: took {:?}; {total} acquisitions, longest wait {longest:?}, longest past the failover {past:?} (lease {lease:?})",
        done - began
    );
    assert!(past <= lease, "a waiter waited {past:?} past the failover");
}

/// Watched locks spread over every shard stay held across several leases:
/// the watchdog renews each slot's locks on its own node (a script's keys
/// must share a slot), all calls of a round sent at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_locks_across_shards_stay_held() {
    let cluster = RedisCluster::start(3, 0);
    let lease = Duration::from_millis(900);
    let lock = lock_client(&cluster, lease).await;
    let data = data_client(&cluster).await;
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(lock.lock(&format!("w:{i}")).await.unwrap());
    }
    tokio::time::sleep(lease * 3).await;
    for g in &guards {
        assert!(g.is_held(), "{} lost", g.key());
        let pttl: i64 = data.pttl(lock.redis_key(g.key())).await.unwrap();
        assert!(pttl > 0, "{}: pttl {pttl}", g.key());
    }
    for g in guards {
        g.release().await.unwrap();
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Migrate `slot` and its keys from its primary to another one, the way
/// `redis-cli --cluster reshard` does.
async fn move_slot(cluster: &RedisCluster, slot: u16) {
    let admin = cluster.nodes[0].admin().await;
    let from = owner_port(&admin, slot).await;
    let to = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|p| *p != from)
        .unwrap();
    let s = slot.to_string();
    let (from_id, to_id) = (
        cli(from, &["CLUSTER", "MYID"]),
        cli(to, &["CLUSTER", "MYID"]),
    );
    assert_eq!(
        cli(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id]),
        "OK"
    );
    assert_eq!(
        cli(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id]),
        "OK"
    );
    loop {
        let keys = cli(from, &["CLUSTER", "GETKEYSINSLOT", &s, "100"]);
        let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
        if keys.is_empty() {
            break;
        }
        let port = to.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        args.extend(keys.iter().copied());
        assert_eq!(cli(from, &args), "OK");
    }
    for n in &cluster.nodes {
        cli(n.port, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id]);
    }
}

async fn totals(cluster: &RedisCluster) -> HashMap<String, u64> {
    let mut t = HashMap::new();
    for n in &cluster.nodes {
        for (k, v) in command_calls(&n.admin().await).await {
            *t.entry(k).or_default() += v;
        }
    }
    t
}

/// [`totals`] of the calls that did not fail (see `command_runs`).
async fn runs(cluster: &RedisCluster) -> HashMap<String, u64> {
    let mut t = HashMap::new();
    for n in &cluster.nodes {
        for (k, v) in support::command_runs(&n.admin().await).await {
            *t.entry(k).or_default() += v;
        }
    }
    t
}

/// One cluster change (an unrelated slot moves) must cost one refresh, not
/// start a loop of CLUSTER SLOTS, SSUBSCRIBE and wake-ups (fred announces a
/// change on every sync, including relaylock's own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_change_does_not_start_a_resync_loop() {
    let cluster = RedisCluster::start(3, 0);
    let lock = lock_client(&cluster, Duration::from_secs(30)).await;
    let g = lock.lock("hot").await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock("hot").await.unwrap().release().await })
    };
    support::until_queued(&data_client(&cluster).await, &lock, "hot").await;
    let other = lock.redis_key("unrelated");
    move_slot(&cluster, redis_keyslot(other.as_bytes())).await;
    let _ = lock.is_locked("unrelated").await; // one MOVED
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = totals(&cluster).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = totals(&cluster).await;
    let (slots, ssub) = (
        delta(&before, &after, "cluster|slots"),
        delta(&before, &after, "ssubscribe"),
    );
    println!("2 s after one change: {slots} CLUSTER SLOTS, {ssub} SSUBSCRIBE");
    // The heartbeat re-reads the slot map every second (command timeout 2 s).
    assert!(
        slots <= 8 && ssub <= 2,
        "resync loop: {slots} CLUSTER SLOTS, {ssub} SSUBSCRIBE"
    );
    g.release().await.unwrap();
    waiter.await.unwrap().unwrap();
}

/// The slot of a lock moves while a waiter of another client waits. The old
/// node drops the waiter's shard subscription (fred swallows the
/// notification) and the release is published on the new node: the
/// heartbeat's slot-map check must move the subscription and wake the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_its_slot_when_it_migrates() {
    let cluster = RedisCluster::start(3, 0);
    let lease = Duration::from_secs(6);
    let a = lock_client(&cluster, lease).await;
    let b = lock_client(&cluster, lease).await;
    let key = "hot";
    let g = a.lock(key).await.unwrap();
    let waiter = support::spawn_waiter(&b, key);
    support::until_queued(&data_client(&cluster).await, &b, key).await;
    let moved = Instant::now();
    move_slot(&cluster, redis_keyslot(a.redis_key(key).as_bytes())).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    g.release().await.unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter is stuck")
        .unwrap();
    println!(
        "slot moved: the waiter acquired {:?} after the release, {:?} after the move (lease {lease:?}, heartbeat 1 s)",
        woke - released,
        woke - moved
    );
    // Within a heartbeat (1 s) plus a resubscription, not the 6 s lease.
    assert!(
        woke - moved < Duration::from_millis(2500),
        "{:?}",
        woke - moved
    );
}

/// As above, but fred has already refreshed the subscriber's slot map by
/// itself before relaylock looks: another waiter of the same client
/// subscribes a channel of the same slot right after the move, and fred
/// follows the MOVED reply to that SSUBSCRIBE. The first waiter's channel,
/// still subscribed on the old node, must be moved too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_its_slot_when_fred_saw_the_move_first() {
    let cluster = RedisCluster::start(3, 0);
    let lease = Duration::from_secs(6);
    let a = lock_client(&cluster, lease).await;
    let b = lock_client(&cluster, lease).await;
    let key = "hot";
    let slot = redis_keyslot(a.redis_key(key).as_bytes());
    let twin = (0..)
        .map(|i| format!("twin{i}"))
        .find(|k| redis_keyslot(a.redis_key(k).as_bytes()) == slot)
        .unwrap();
    let g = a.lock(key).await.unwrap();
    let g_twin = a.lock(&twin).await.unwrap();
    let waiter = support::spawn_waiter(&b, key);
    support::until_queued(&data_client(&cluster).await, &b, key).await;
    let moved = Instant::now();
    move_slot(&cluster, slot).await;
    let twin_waiter = support::spawn_waiter(&b, &twin);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    g.release().await.unwrap();
    let woke = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter is stuck")
        .unwrap();
    println!(
        "slot moved, fred saw it first: the waiter acquired {:?} after the release, {:?} after the move (lease {lease:?})",
        woke - released,
        woke - moved
    );
    assert!(
        woke - moved < Duration::from_millis(2500),
        "{:?}",
        woke - moved
    );
    g_twin.release().await.unwrap();
    twin_waiter.await.unwrap();
}

/// Semaphores on keys spread across all shards, in two clients with
/// sharded pub/sub: every script of one semaphore touches one slot (its
/// names share the hash tag), a waiting client is woken by its shard's
/// SPUBLISH (not its lease), the watchdog renews semaphore holds next to
/// locks in per-slot calls, and the limit holds on every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_across_shards() {
    let cluster = RedisCluster::start(3, 0);
    let lease = Duration::from_millis(900);
    let a = lock_client(&cluster, lease).await;
    let b = lock_client(&cluster, lease).await;
    // Watched holds on many slots, a lock among them: renewed across leases.
    let mut held = Vec::new();
    for i in 0..60 {
        held.push(
            a.semaphore(format!("s:{i}"), 2)
                .unwrap()
                .acquire()
                .await
                .unwrap(),
        );
    }
    let lock = a.lock("s:lock").await.unwrap();
    tokio::time::sleep(lease * 3).await;
    for p in &held {
        assert!(p.is_held(), "{} lost", p.key());
    }
    assert!(lock.is_held());
    // Contention across the two clients on keys of different shards.
    let over = contend_for_permits(&a, &b).await;
    assert_eq!(over.load(std::sync::atomic::Ordering::SeqCst), 0);
    // A waiter in the other client is woken by the release message.
    let full = a.semaphore("s:0", 2).unwrap().acquire().await.unwrap();
    let waiter = {
        let sem = b.semaphore("s:0", 2).unwrap();
        tokio::spawn(async move {
            let p = sem.acquire().await.unwrap();
            let at = Instant::now();
            p.release().await.unwrap();
            at
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    full.release().await.unwrap();
    let took = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is stuck")
        .unwrap()
        - released;
    println!(
        "cluster semaphore: the other client's waiter got the permit {took:?} after the release"
    );
    assert!(took < Duration::from_millis(500), "{took:?}");
    for p in held {
        p.release().await.unwrap();
    }
    lock.release().await.unwrap();
}

/// 24 tasks of clients `a` and `b` take one of the 2 permits of 6
/// semaphores (keys of different shards) 10 times each; returns how many
/// entries found 2 already inside (over the limit).
async fn contend_for_permits(a: &LockClient, b: &LockClient) -> Arc<std::sync::atomic::AtomicU64> {
    let inside: Arc<Vec<std::sync::atomic::AtomicU32>> = Arc::new(
        (0..6)
            .map(|_| std::sync::atomic::AtomicU32::new(0))
            .collect(),
    );
    let over = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..24 {
        let client = if t % 2 == 0 { a.clone() } else { b.clone() };
        let (inside, over) = (Arc::clone(&inside), Arc::clone(&over));
        tasks.push(tokio::spawn(async move {
            for r in 0..10 {
                let k = (t + r) % 6;
                let p = client
                    .semaphore(format!("c:{k}"), 2)
                    .unwrap()
                    .acquire_with(
                        relaylock::SemaphoreOptions::default().lease(Duration::from_secs(10)),
                    )
                    .await
                    .unwrap();
                use std::sync::atomic::Ordering::SeqCst;
                if inside[k].fetch_add(1, SeqCst) >= 2 {
                    over.fetch_add(1, SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside[k].fetch_sub(1, SeqCst);
                p.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a semaphore waiter is stuck")
            .unwrap();
    }
    over
}

/// Read-write locks on keys spread across the shards, in two clients with
/// sharded pub/sub: both of a lock's channels share its hash tag, a writer
/// is never inside with anyone, and a writer waiting in the other client is
/// woken by its shard's message when the last read ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rw_locks_across_shards() {
    let cluster = RedisCluster::start(3, 0);
    let a = lock_client(&cluster, Duration::from_secs(30)).await;
    let b = lock_client(&cluster, Duration::from_secs(30)).await;
    let state: Arc<Vec<Mutex<(u32, u32)>>> = Arc::new((0..4).map(|_| Mutex::new((0, 0))).collect());
    let bad = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let client = if t % 2 == 0 { a.clone() } else { b.clone() };
        let (state, bad) = (Arc::clone(&state), Arc::clone(&bad));
        tasks.push(tokio::spawn(async move {
            for r in 0..8 {
                let k = (t + r) % 4;
                let rw = client.rw_lock(format!("rw:{k}"));
                let write = (t + r) % 5 == 0;
                let enter = |write: bool| {
                    let mut s = state[k].lock().unwrap();
                    if s.1 > 0 || (write && s.0 > 0) {
                        bad.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    if write {
                        s.1 += 1
                    } else {
                        s.0 += 1
                    }
                };
                let leave = |write: bool| {
                    let mut s = state[k].lock().unwrap();
                    if write {
                        s.1 -= 1
                    } else {
                        s.0 -= 1
                    }
                };
                if write {
                    let w = rw.write().await.unwrap();
                    enter(true);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    leave(true);
                    w.release().await.unwrap();
                } else {
                    let g = rw.read().await.unwrap();
                    enter(false);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    leave(false);
                    g.release().await.unwrap();
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("a read-write lock waiter is stuck")
            .unwrap();
    }
    assert_eq!(bad.load(std::sync::atomic::Ordering::SeqCst), 0);
    let r = a.rw_lock("rw:0").read().await.unwrap();
    let writer = {
        let rw = b.rw_lock("rw:0");
        tokio::spawn(async move {
            let w = rw.write().await.unwrap();
            let at = Instant::now();
            w.release().await.unwrap();
            at
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    r.release().await.unwrap();
    let took = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer is stuck")
        .unwrap()
        - released;
    println!("cluster rwlock: the other client's writer got in {took:?} after the last read");
    assert!(took < Duration::from_millis(500), "{took:?}");
}

/// `min_replicas` in a cluster: each acquisition is acknowledged by the
/// replica of the shard that owns its key (its `WAIT` goes to that shard's
/// primary). With one shard's replica frozen, that shard's keys fail with
/// `NotReplicated` and are released, while the other shards' keys are still
/// acknowledged: a `WAIT` sent to another primary would have counted its
/// healthy replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_waits_on_the_owning_shard() {
    let cluster = RedisCluster::start(3, 1);
    let lock = lock_client(&cluster, Duration::from_secs(30)).await;
    let admin = cluster.nodes[0].admin().await;
    let keys: Vec<String> = (0..24).map(|i| format!("replicated:{i}")).collect();
    let mut owners = Vec::new();
    for key in &keys {
        owners.push(owner_port(&admin, redis_keyslot(lock.redis_key(key).as_bytes())).await);
    }
    let opts = |ms| {
        LockOptions::default()
            .lease(Duration::from_secs(30))
            .min_replicas(1, Duration::from_millis(ms))
    };
    // Every replica online (the first full syncs take a few seconds).
    for (key, owner) in keys.iter().zip(&owners) {
        let acked = eventually(Duration::from_secs(20), || async {
            match lock.lock_with(key, opts(1000)).await {
                Ok(g) => g.release().await.is_ok(),
                Err(_) => false,
            }
        })
        .await;
        assert!(acked, "{key} (shard {owner}) was never acknowledged");
    }

    let frozen_owner = owners[0];
    let frozen = cluster
        .replica_of(frozen_owner)
        .expect("every primary has a replica");
    frozen.pause();
    let (mut refused, mut acknowledged) = (0, 0);
    for (key, owner) in keys.iter().zip(&owners) {
        let r = lock.lock_with(key, opts(300)).await;
        if *owner == frozen_owner {
            assert!(
                matches!(
                    r,
                    Err(relaylock::Error::NotReplicated {
                        acked: 0,
                        required: 1
                    })
                ),
                "{key} on the frozen shard: {r:?}"
            );
            assert!(!lock.is_locked(key).await.unwrap(), "{key} left locked");
            refused += 1;
        } else {
            r.unwrap_or_else(|e| panic!("{key}: {e}"))
                .release()
                .await
                .unwrap();
            acknowledged += 1;
        }
    }
    frozen.resume();
    println!("cluster min_replicas: {refused} keys refused on the frozen shard, {acknowledged} acknowledged on the others");
    assert!(refused > 0 && acknowledged > 0);
}

/// Every primary of a cluster is checked for eviction. One of three may evict:
/// `build()` with `Refuse` names that one, and `eviction::read_all` reads
/// all three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primary_is_checked_for_eviction() {
    let cluster = RedisCluster::start(3, 0);
    let evicting = &cluster.nodes[1];
    let admin = evicting.admin().await;
    for (name, value) in [("maxmemory", "200mb"), ("maxmemory-policy", "allkeys-lru")] {
        let _: () = admin
            .custom(
                CustomCommand::new_static("CONFIG", None, false),
                vec!["SET", name, value],
            )
            .await
            .unwrap();
    }
    match LockClient::builder()
        .url(cluster.url())
        .on_evicting_server(relaylock::OnEvictingServer::Refuse)
        .build()
        .await
    {
        Err(relaylock::Error::EvictingServer { server, policy, .. }) => {
            assert_eq!(server, format!("127.0.0.1:{}", evicting.port));
            assert_eq!(policy, "allkeys-lru");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let client = lock_client(&cluster, Duration::from_secs(5)).await;
    let read = relaylock::eviction::read_all(client.fred_client()).await;
    assert_eq!(read.len(), 3, "{read:?}");
    let evicts: Vec<_> = read
        .iter()
        .filter(|m| m.may_evict() == Some(true))
        .collect();
    assert_eq!(evicts.len(), 1, "{read:?}");
    assert_eq!(evicts[0].server, format!("127.0.0.1:{}", evicting.port));
}

/// A vanished value in a cluster: the lock's value vanishes (a `DEL`, as an
/// eviction would), and the holder's release tells the other client's
/// waiter through sharded pub/sub (`PUBSUB SHARDCHANNELS` on the key's
/// node, `SPUBLISH`): it takes the lock at once, not when the lease it saw
/// ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_value_wakes_the_other_clients_in_a_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let a = lock_client(&cluster, Duration::from_secs(5)).await;
    let b = lock_client(&cluster, Duration::from_secs(5)).await;
    let data = data_client(&cluster).await;
    let guard = a
        .lock_with("gone", LockOptions::default().lease(Duration::from_secs(6)))
        .await
        .unwrap();
    let waiter = support::spawn_waiter(&b, "gone");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deleted: i64 = data.del(a.redis_key("gone")).await.unwrap();
    assert_eq!(deleted, 1);
    let released = Instant::now();
    assert!(matches!(
        guard.release().await,
        Err(relaylock::Error::LockLost { .. })
    ));
    let after = waiter.await.unwrap().duration_since(released);
    println!("cluster: the other client's waiter took the lock {after:?} after the release");
    assert!(
        after < Duration::from_secs(1),
        "{after:?}: it slept on the lease"
    );
}

/// Multi-key locks across slots: keys of one slot (a shared `{tag}` at the
/// start of the key) go in one call, one per slot group, to take and to
/// release; the renewals keep every key of a watched set held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_locks_across_slots() {
    let cluster = RedisCluster::start(3, 0);
    let lease = Duration::from_millis(900);
    let a = lock_client(&cluster, lease).await;
    let keys = ["{g1}:a", "{g1}:b", "{g1}:c", "{g2}:a", "{g2}:b", "solo"];
    let slots: std::collections::HashSet<u16> = keys
        .iter()
        .map(|k| redis_keyslot(a.redis_key(k).as_bytes()))
        .collect();
    assert_eq!(slots.len(), 3, "three slot groups");
    let before = runs(&cluster).await;
    let g = a.lock_all(keys.iter().rev()).await.unwrap();
    let taken = runs(&cluster).await;
    assert_eq!(
        delta(&before, &taken, "evalsha"),
        3,
        "one call per slot group"
    );
    // The keys of one slot are adjacent, in the global order.
    let order: Vec<u16> = g
        .keys()
        .map(|k| redis_keyslot(a.redis_key(k).as_bytes()))
        .collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");
    // Watched: held across three leases.
    tokio::time::sleep(lease * 3).await;
    assert!(g.is_held());
    let data = data_client(&cluster).await;
    for k in keys {
        let pttl: i64 = data.pttl(a.redis_key(k)).await.unwrap();
        assert!(pttl > 0, "{k}: pttl {pttl}");
    }
    let before = runs(&cluster).await;
    g.release().await.unwrap();
    let released = runs(&cluster).await;
    assert_eq!(
        delta(&before, &released, "evalsha"),
        3,
        "one release per slot group"
    );
}

/// Two clients naming overlapping sets across slots in opposite orders,
/// mixed with single-key locks: they never deadlock and never share a key,
/// and every key is free at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_locks_across_slots_under_contention() {
    let cluster = RedisCluster::start(3, 0);
    let lease = Duration::from_millis(900);
    let (a, b) = (
        lock_client(&cluster, lease).await,
        lock_client(&cluster, lease).await,
    );
    let keys = ["{g1}:a", "{g1}:b", "{g1}:c", "{g2}:a", "{g2}:b", "solo"];
    let busy: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let mut tasks = Vec::new();
    for t in 0..8u64 {
        let lock = if t % 2 == 0 { a.clone() } else { b.clone() };
        let busy = Arc::clone(&busy);
        tasks.push(tokio::spawn(async move {
            let mut rng = support::Lcg(t * 31 + 7);
            for round in 0..10u64 {
                let opts = LockOptions::default().wait(Duration::from_secs(20));
                let n = 1 + rng.below(4) as usize;
                let mut mine: Vec<&str> = (0..n).map(|_| keys[rng.below(6) as usize]).collect();
                if round % 2 == 0 {
                    mine.reverse();
                }
                let held: Vec<String>;
                let guard: Box<dyn std::any::Any + Send> = if n == 1 {
                    let g = lock.lock_with(mine[0], opts).await.unwrap();
                    held = vec![mine[0].to_owned()];
                    Box::new(g)
                } else {
                    let g = lock.lock_all_with(&mine, opts).await.unwrap();
                    held = g.keys().map(str::to_owned).collect();
                    Box::new(g)
                };
                for k in &held {
                    assert!(busy.lock().unwrap().insert(k.clone()), "two holders of {k}");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                for k in &held {
                    busy.lock().unwrap().remove(k);
                }
                drop(guard);
            }
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert!(all.is_ok(), "stalled");
    let data = data_client(&cluster).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            let mut free = true;
            for k in keys {
                let v: Option<String> = data.get(a.redis_key(k)).await.unwrap();
                free &= v.is_none_or(|v| v.starts_with('-'));
            }
            free
        })
        .await,
        "every key free at the end"
    );
}
