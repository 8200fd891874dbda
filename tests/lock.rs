//! Integration tests of the core lock against a real redis-server.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{Error, LockClient, LockOptions};
use support::{command_calls, delta, eventually, Admin, RedisServer};

async fn client(server: &RedisServer) -> LockClient {
    support::client(&server.url()).await
}

const CHILD_ENV: &str = "RELAYLOCK_TEST_CHILD_URL";
const TASKS: usize = 64;
const ROUNDS: usize = 5;

/// 64 tasks per process, a second process of this very test binary, a
/// non-atomic GET/SET counter in Redis under the lock: the final count must be
/// exact, and the fencing tokens, appended under the lock, strictly increase
/// in the order the critical sections ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_across_tasks_and_processes() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        // Child role: the same workload from a second process.
        contend(&url).await;
        return;
    }
    let server = RedisServer::start();
    let admin = server.admin().await;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "mutual_exclusion_across_tasks_and_processes",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD_ENV, server.url())
        .spawn()
        .expect("spawn the second process");
    contend(&server.url()).await;
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "second process failed: {status}");

    let count: i64 = admin.get("counter").await.unwrap();
    assert_eq!(
        count,
        (2 * TASKS * ROUNDS) as i64,
        "lost updates: mutual exclusion broken"
    );
    let fences: Vec<u64> = admin.lrange("fences", 0, -1).await.unwrap();
    assert_eq!(fences.len(), 2 * TASKS * ROUNDS);
    for w in fences.windows(2) {
        assert!(
            w[0] < w[1],
            "fencing tokens not strictly increasing: {} then {}",
            w[0],
            w[1]
        );
    }
}

async fn contend(url: &str) {
    let lock = LockClient::connect(url).await.unwrap();
    let data = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    data.init().await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (lock, data) = (lock.clone(), data.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock.lock("counter").await.unwrap();
                let n: Option<i64> = data.get("counter").await.unwrap();
                data.set::<(), _, _>("counter", n.unwrap_or(0) + 1, None, None, false)
                    .await
                    .unwrap();
                data.rpush::<(), _, _>("fences", guard.fencing_token())
                    .await
                    .unwrap();
                guard.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// `tasks` tasks, spread over `clients`, each lock the key "hot", hold it
/// 1 ms and release it, `rounds` times.
async fn take_turns(clients: &[LockClient], tasks: usize, rounds: usize) {
    let mut running = Vec::new();
    for i in 0..tasks {
        let lock = clients[i % clients.len()].clone();
        running.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let g = lock.lock("hot").await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                g.release().await.unwrap();
            }
        }));
    }
    for t in running {
        t.await.unwrap();
    }
}

/// 200 waiters in one process lock, hold 1 ms and release, several rounds:
/// acquire script calls per acquisition, read from the server, stay <= 1.5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_retry_per_release() {
    const WAITERS: usize = 200;
    const ROUNDS: usize = 5;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let before = command_calls(&admin).await;
    take_turns(&[lock], WAITERS, ROUNDS).await;
    let after = command_calls(&admin).await;
    let acquisitions = (WAITERS * ROUNDS) as u64;
    // Every acquisition is released exactly once; every other EVALSHA is an acquire attempt.
    let scripts = delta(&before, &after, "evalsha");
    let attempts = scripts - acquisitions;
    let per_acq = attempts as f64 / acquisitions as f64;
    println!(
        "one_retry_per_release: {acquisitions} acquisitions, {attempts} acquire script calls, {per_acq:.3} per acquisition, {} PUBLISH, {} SUBSCRIBE",
        delta(&before, &after, "publish"),
        delta(&before, &after, "subscribe"),
    );
    // Every release is one script call, so the count cannot be below the
    // acquisitions. Releases hand the lock to the next local waiter directly
    // (no acquire call for it), so acquire calls are mostly the first tries.
    assert!(scripts >= acquisitions);
    // The issue sets 1.5; the design gives at most 1.00 (one try per release
    // plus the confirmer's and one probe's; fewer with direct hand-overs),
    // so guard against regressions well below 1.5.
    assert!(
        per_acq <= 1.25,
        "{per_acq:.3} acquire calls per acquisition"
    );
}

/// The lean protocol's costs, counted by the server (not timed): contention
/// within ONE client publishes nothing (no other client waits; the releasing
/// client wakes its own waiters) and costs at most
/// about 7 Redis commands per acquisition, script internals included;
/// contention between two clients publishes hand-over messages and both
/// get their turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_publishes_only_when_another_client_waits() {
    const TASKS: usize = 32;
    const ROUNDS: usize = 10;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let total = |calls: &std::collections::HashMap<String, u64>| {
        calls
            .iter()
            .filter(|(c, _)| c.as_str() != "info")
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    let acquisitions = (TASKS * ROUNDS) as u64;

    let one = client(&server).await;
    let before = command_calls(&admin).await;
    take_turns(&[one], TASKS, ROUNDS).await;
    let after = command_calls(&admin).await;
    let published = delta(&before, &after, "publish");
    let per_acq = (total(&after) - total(&before)) as f64 / acquisitions as f64;
    println!("one client: {published} PUBLISH, {per_acq:.2} Redis commands per acquisition");
    assert_eq!(
        published, 0,
        "a release published with no other client waiting"
    );
    assert!(per_acq <= 8.0, "{per_acq:.2} commands per acquisition");

    let two = vec![client(&server).await, client(&server).await];
    let before = command_calls(&admin).await;
    take_turns(&two, TASKS, ROUNDS).await;
    let after = command_calls(&admin).await;
    let published = delta(&before, &after, "publish");
    let per_acq = (total(&after) - total(&before)) as f64 / acquisitions as f64;
    println!("two clients: {published} PUBLISH, {per_acq:.2} Redis commands per acquisition");
    assert!(published > 0, "clients handed over without a message");
    assert!(per_acq <= 10.0, "{per_acq:.2} commands per acquisition");
}

#[tokio::test]
async fn try_lock_and_timeout() {
    let server = RedisServer::start();
    let lock = client(&server).await;
    let held = lock.try_lock("k").await.unwrap().expect("free lock");
    assert!(lock.try_lock("k").await.unwrap().is_none());
    assert!(lock.is_locked("k").await.unwrap());

    let start = Instant::now();
    let r = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_millis(300)))
        .await;
    let waited = start.elapsed();
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(
        waited >= Duration::from_millis(300),
        "gave up early: {waited:?}"
    );
    assert!(waited < Duration::from_secs(3), "overslept: {waited:?}");

    // wait(0) is exactly one try.
    let r = lock
        .lock_with("k", LockOptions::default().wait(Duration::ZERO))
        .await;
    assert!(matches!(r, Err(Error::Timeout { .. })));

    held.release().await.unwrap();
    assert!(!lock.is_locked("k").await.unwrap());
    let g = lock
        .try_lock("k")
        .await
        .unwrap()
        .expect("free after release");
    g.release().await.unwrap();
}

/// A waiter wakes at the holder's remaining lease when nobody releases.
#[tokio::test]
async fn waiter_takes_over_an_expired_lease() {
    let server = RedisServer::start();
    let lock = client(&server).await;
    let dead = lock
        .lock_with(
            "k",
            LockOptions::default().lease(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    std::mem::forget(dead); // a holder that died without releasing
    let start = Instant::now();
    let g = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "took {waited:?} to take over a 300 ms lease"
    );
    g.release().await.unwrap();
}

#[tokio::test]
async fn expired_lock_reports_lost_and_never_touches_the_new_owner() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let a = client(&server).await;
    let b = client(&server).await;
    let old = a
        .lock_with(
            "k",
            LockOptions::default().lease(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let new = b.lock("k").await.unwrap();
    assert!(new.fencing_token() > old.fencing_token());
    let new_value: String = admin.get(a.redis_key("k")).await.unwrap();
    let new_ttl: i64 = admin.pttl(a.redis_key("k")).await.unwrap();

    assert!(matches!(
        old.extend(Duration::from_secs(60)).await,
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(old.release().await, Err(Error::LockLost { .. })));

    let value: String = admin.get(a.redis_key("k")).await.unwrap();
    assert_eq!(value, new_value, "the new owner's key was modified");
    assert!(value.starts_with(new.token()));
    let ttl: i64 = admin.pttl(a.redis_key("k")).await.unwrap();
    assert!(
        ttl <= new_ttl && ttl > 20_000,
        "the new owner's lease was changed: {ttl}"
    );
    new.release().await.unwrap();
}

#[tokio::test]
async fn extend_keeps_the_lock_past_its_first_lease() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let g = lock
        .lock_with(
            "k",
            LockOptions::default().lease(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    g.extend(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ttl: i64 = admin.pttl(lock.redis_key("k")).await.unwrap();
    assert!(ttl > 3_000, "extend did not take: pttl {ttl}");
    assert!(lock.try_lock("k").await.unwrap().is_none());
    g.release().await.unwrap();
}

#[tokio::test]
async fn dropped_guard_is_released_in_the_background() {
    let server = RedisServer::start();
    let lock = client(&server).await;
    {
        let _g = lock.lock("k").await.unwrap();
    }
    let start = Instant::now();
    let g = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(start.elapsed() < Duration::from_secs(2));
    g.release().await.unwrap();
}

/// `CLIENT KILL TYPE pubsub` while waiters wait, then releases: every waiter
/// still acquires, long before the 20 s lease would have let them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_notification_after_subscriber_kill() {
    const WAITERS: usize = 20;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = client(&server).await;
    let waiters_client = client(&server).await;
    let lease = LockOptions::default().lease(Duration::from_secs(20));
    let holder = holder_client.lock_with("k", lease.clone()).await.unwrap();

    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let (c, done) = (waiters_client.clone(), done.clone());
        let opts = lease.clone().wait(Duration::from_secs(10));
        tasks.push(tokio::spawn(async move {
            let g = c.lock_with("k", opts).await?;
            done.fetch_add(1, Ordering::SeqCst);
            g.release().await
        }));
    }
    let channel = format!("{}:ch", holder_client.redis_key("k"));
    assert!(
        eventually(Duration::from_secs(5), || async {
            support::numsub(&admin, &channel).await > 0
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;

    let start = Instant::now();
    let killed = support::client_kill(&admin, &["TYPE", "pubsub"]).await;
    assert!(killed >= 1);
    holder.release().await.unwrap(); // published while the subscriber is down
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), WAITERS);
    let took = start.elapsed();
    assert!(took < Duration::from_secs(8), "took {took:?}");
    println!("lost_notification_after_subscriber_kill: all {WAITERS} waiters acquired {took:?} after the kill");
}

/// A waiter that was woken by a release and is then dropped before using the
/// wake-up passes it on: the next waiter acquires at once instead of sleeping
/// until the (here 30 s) lease bound.
#[tokio::test]
async fn cancelled_woken_waiter_passes_the_wakeup_on() {
    let server = RedisServer::start();
    let lock = client(&server).await;
    let other = client(&server).await;
    let holder = other.lock("k").await.unwrap();

    let mut first =
        Box::pin(lock.lock_with("k", LockOptions::default().wait(Duration::from_secs(20))));
    tokio::select! {
        r = &mut first => panic!("acquired a held lock: {r:?}"),
        _ = tokio::time::sleep(Duration::from_millis(300)) => {}
    }
    let second = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let g = lock
                .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
                .await;
            (g, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    // Let the message reach the subscriber and wake `first`, which is never polled again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(first);
    let (g, waited) = second.await.unwrap();
    let g = g.expect("second waiter was stranded");
    assert!(
        waited < Duration::from_secs(3),
        "second waiter took {waited:?}"
    );
    g.release().await.unwrap();
}

/// A lock future dropped while its acquire script is in flight may own the
/// lock without knowing it: that token is released in the background.
#[tokio::test]
async fn cancelled_in_flight_acquire_leaves_no_orphan() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let before = command_calls(&admin).await;
    {
        let mut fut = Box::pin(lock.lock("k"));
        assert!(
            futures::poll!(&mut fut).is_pending(),
            "acquired without a round trip?"
        );
    } // dropped with the acquire script sent
    let sent = eventually(Duration::from_secs(5), || async {
        delta(&before, &command_calls(&admin).await, "evalsha") >= 2
    })
    .await;
    assert!(
        sent,
        "the acquire and the background release should both reach Redis"
    );
    let g = lock
        .try_lock("k")
        .await
        .unwrap()
        .expect("orphaned lock still held");
    g.release().await.unwrap();
}

/// When the waiters are gone, no channel stays subscribed and the only names
/// left are the short-lived side hashes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_subscription_outlives_its_waiters() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let holder = lock.lock("a").await.unwrap();
    let holder_b = lock.lock("b").await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let lock = lock.clone();
        let key = if i % 2 == 0 { "a" } else { "b" };
        // Half leave by timeout, half acquire.
        let wait = if i % 4 < 2 {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(10)
        };
        tasks.push(tokio::spawn(async move {
            match lock.lock_with(key, LockOptions::default().wait(wait)).await {
                Ok(g) => g.release().await.unwrap(),
                Err(Error::Timeout { .. }) => {}
                Err(e) => panic!("{e}"),
            }
        }));
    }
    assert!(
        eventually(Duration::from_secs(5), || async {
            support::channels(&admin, "relaylock:3:{*").await.len() == 2
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    holder.release().await.unwrap();
    holder_b.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let clean = eventually(Duration::from_secs(5), || async {
        support::channels(&admin, "relaylock:3:{*").await.is_empty()
    })
    .await;
    assert!(
        clean,
        "left subscribed: {:?}",
        support::channels(&admin, "relaylock:3:{*").await
    );
    assert_eq!(
        support::numsub(&admin, &format!("{}:ch", lock.redis_key("a"))).await,
        0
    );
    // What stays behind is the two locks' tombstones (free, nobody queued),
    // each with a TTL, and their queue-times records (scripts::QUEUE_TIMES),
    // which expire within the same retention (beside the client's own
    // record, `relaylock:3:client:<id>`, for operators).
    let mut left = support::keys(&admin, "relaylock:3:{*").await;
    left.sort();
    let times = |k: &str| format!("{}{}", lock.redis_key(k), relaylock::__scripts::QUEUE_TIMES);
    assert_eq!(
        left,
        vec![
            lock.redis_key("a"),
            times("a"),
            lock.redis_key("b"),
            times("b")
        ]
    );
    for name in [times("a"), times("b")] {
        let ttl: i64 = admin.pttl(&name).await.unwrap();
        assert!(
            ttl > 0 && ttl <= relaylock::__scripts::SIDE_RETENTION_MS as i64,
            "queue times ttl {ttl}"
        );
    }
    left.retain(|k| !k.ends_with(relaylock::__scripts::QUEUE_TIMES));
    for name in &left {
        let value = support::lock_value(&admin, name).await.unwrap();
        assert!(value.is_free() && value.queue.is_empty(), "{value:?}");
        let ttl: i64 = admin.pttl(name).await.unwrap();
        assert!(
            ttl > 0 && ttl <= relaylock::__scripts::SIDE_RETENTION_MS as i64,
            "tombstone ttl {ttl}"
        );
    }
}

/// Fencing tokens keep increasing across a restart with no persistence, and
/// a holder whose key vanished with the restart learns it on release.
#[tokio::test]
async fn fencing_tokens_survive_a_restart() {
    let mut server = RedisServer::start();
    let lock = LockClient::builder()
        .url(server.url())
        .command_timeout(Duration::from_secs(10))
        .build()
        .await
        .unwrap();
    let mut last = 0;
    for _ in 0..50 {
        let g = lock.lock("k").await.unwrap();
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.release().await.unwrap();
    }
    let held = lock.lock("k").await.unwrap();
    server.restart();
    let g = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(
        g.fencing_token() > held.fencing_token(),
        "fence went backwards after restart"
    );
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));
    g.release().await.unwrap();
}

/// RELEASE's arguments for `token`'s hold with `fence`, by client `me`, as
/// relaylock's lean release sends them (no `next`, no requeue).
fn release_args(token: String, fence: String, channel: String) -> Vec<String> {
    vec![
        token,
        fence,
        channel,
        relaylock::__scripts::SIDE_RETENTION_MS.to_string(),
        relaylock::__scripts::LOCK_RING_CHARS.to_string(),
        "me".into(),
        relaylock::__scripts::HANDOFF_GRACE_MS.to_string(),
        "PUBLISH".into(),
        "0".into(),
    ]
}

/// The release script recognises its own replay (fred resends a command
/// whose reply was lost) and does not report a false loss.
#[tokio::test]
async fn replayed_release_is_not_a_false_loss() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let key = lock.redis_key("k");
    let channel = format!("{key}:ch");
    let g = lock.lock("k").await.unwrap();
    let (token, fence) = (g.token().to_owned(), g.fencing_token().to_string());
    std::mem::forget(g);
    let release = |fence: String| {
        let (admin, key, channel, token) =
            (admin.clone(), key.clone(), channel.clone(), token.clone());
        async move {
            let keys = vec![
                key.clone(),
                format!("{key}:void:{token}"),
                format!("{key}:void"),
            ];
            let args = release_args(token, fence, channel);
            admin
                .eval::<i64, _, _, _>(relaylock::__scripts::RELEASE, keys, args)
                .await
                .unwrap()
        }
    };
    assert_eq!(release(fence.clone()).await, 1, "first release");
    // Others take and release the lock 10 times before the replay arrives.
    for _ in 0..10 {
        lock.lock("k").await.unwrap().release().await.unwrap();
    }
    assert_eq!(
        release(fence.clone()).await,
        2,
        "replay recognised as already released"
    );
    assert_eq!(
        release("1".into()).await,
        0,
        "a fence never released is a loss"
    );
}

/// A hot key's ring (protocol 3: differences, not whole fences) holds 30
/// releases or more, so a release replayed 30 releases later is still
/// recognised; and a fence just older than the ring reaches is a loss, not
/// a replay.
#[tokio::test]
async fn a_hot_keys_ring_holds_30_releases() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server).await;
    let key = lock.redis_key("k");
    let mut fences = Vec::new();
    for _ in 0..60 {
        let g = lock.lock("k").await.unwrap();
        fences.push(g.fencing_token());
        g.release().await.unwrap();
    }
    let value: String = admin.get(&key).await.unwrap();
    let ring = value.split('|').nth(2).unwrap().to_owned();
    let kept = ring.split(' ').count();
    println!(
        "{kept} releases in a ring of {} characters: {ring}",
        ring.len()
    );
    assert!(ring.len() <= relaylock::__scripts::LOCK_RING_CHARS);
    assert!(kept >= 30, "only {kept} releases kept");
    let release = |fence: u64| {
        let (admin, key) = (admin.clone(), key.clone());
        async move {
            let args = release_args("gone".into(), fence.to_string(), format!("{key}:ch"));
            admin
                .eval::<i64, _, _, _>(relaylock::__scripts::RELEASE, vec![key], args)
                .await
                .unwrap()
        }
    };
    // Every fence the ring holds is recognised, the next older one is not.
    for (i, &fence) in fences.iter().rev().enumerate() {
        let want = if i < kept { 2 } else { 0 };
        assert_eq!(
            release(fence).await,
            want,
            "the fence released {i} releases ago"
        );
    }
}

/// The release prepends its fence to the ring and cuts the ring to the
/// newest fences that fit in `ring_chars`, at a fence boundary. Protocol 3
/// writes the ring as the newest fence, then each older one as its
/// difference to the one before (`r1 d2 d3 ...`, `r2 = r1 - d2`): a hot
/// key's fences are close, so the ring is a third as long. This checks the
/// script against the rule written plainly (prepend `fence` and
/// `fence - r1` in place of `r1`, or start over at `fence` when it is not
/// newer; then keep what comes before the last space in the first
/// `ring_chars + 1` characters), on rings of numbers of every length from 1
/// to 16 digits, empty to over-full, several limits, and each of the three
/// values a release writes.
#[tokio::test]
async fn the_release_ring_keeps_the_newest_fences_that_fit() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let prepended = |fence: &str, ring: &str| {
        let (r1, older) = ring.split_once(' ').unwrap_or((ring, ""));
        let (f, r1): (u64, Option<u64>) = (fence.parse().unwrap(), r1.parse().ok());
        match r1 {
            Some(r1) if f > r1 && older.is_empty() => format!("{fence} {}", f - r1),
            Some(r1) if f > r1 => format!("{fence} {} {older}", f - r1),
            _ => fence.to_string(),
        }
    };
    let expected = |fence: &str, ring: &str, cap: usize| {
        let ring = prepended(fence, ring);
        if ring.len() <= cap {
            return ring;
        }
        let head = &ring[..(cap + 1).min(ring.len())];
        match head.rfind(' ') {
            Some(i) => head[..i].to_string(),
            None => fence.to_string(),
        }
    };
    // A small deterministic generator: the cases are the same on every run.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let digits = |len: u64, first: u64| {
        // At most 8.99e15: Lua's doubles are exact below 2^53 (9.007e15),
        // and fences (µs since the epoch) are about 1.8e15.
        let mut s = (first % 8 + 1).to_string();
        for i in 1..len {
            s.push(char::from(b'0' + ((first + i * 7) % 10) as u8));
        }
        s
    };
    let key = "p:3:{ring}";
    let keys = vec![
        key.to_string(),
        format!("{key}:void:tok"),
        format!("{key}:void"),
    ];
    let caps = [
        1,
        5,
        16,
        17,
        18,
        33,
        34,
        35,
        100,
        relaylock::__scripts::LOCK_RING_CHARS,
    ];
    for case in 0..600 {
        let entries = next(45);
        // Mostly 16-digit fences (server microseconds), some of any length
        // (the differences of a real ring are shorter).
        let len = |next: &mut dyn FnMut(u64) -> u64| {
            if next(4) == 0 {
                1 + next(16)
            } else {
                16
            }
        };
        let ring: Vec<String> = (0..entries)
            .map(|_| {
                let l = len(&mut next);
                digits(l, next(1_000))
            })
            .collect();
        let ring = ring.join(" ");
        // Mostly newer than the ring's newest fence, by up to 16 digits;
        // else any (older: the ring starts over).
        let newest: Option<u64> = ring.split(' ').next().and_then(|r| r.parse().ok());
        let fence = match newest {
            Some(r1) if next(4) != 0 => {
                let d: u64 = digits(1 + next(15), next(1_000)).parse().unwrap();
                (r1 + d).min(8_999_999_999_999_999).max(r1 + 1).to_string()
            }
            _ => {
                let l = len(&mut next);
                digits(l, next(1_000))
            }
        };
        // The limit: a fixed one, one either side of the prepended ring's
        // length or exactly it, or any.
        let full = prepended(&fence, &ring).len();
        let cap = match case % 5 {
            0 => caps[case / 5 % caps.len()],
            1 => full.saturating_sub(1).max(1),
            2 => full,
            3 => full + 1,
            _ => 1 + next(600) as usize,
        };
        // Each way a release writes the ring: a tombstone, a reservation
        // for a queued client (whose id here holds a space, so that a cut
        // that looked outside the ring would show), the lock given to a
        // local waiter; with and without a `void` field.
        let way = case / 3 % 3;
        let void = if case % 2 == 0 { "" } else { "99999999999999" };
        let queue = if way == 1 { "a b,cc" } else { "" };
        let _: () = admin
            .set(
                key,
                format!("tok:{fence}|{queue}|{ring}|{void}"),
                None,
                None,
                false,
            )
            .await
            .unwrap();
        let mut args: Vec<String> = vec![
            "tok".into(),
            fence.clone(),
            format!("{key}:ch"),
            relaylock::__scripts::SIDE_RETENTION_MS.to_string(),
            cap.to_string(),
            "me".into(),
            relaylock::__scripts::HANDOFF_GRACE_MS.to_string(),
            "PUBLISH".into(),
            "0".into(),
        ];
        if way == 2 {
            args.extend(["nx".into(), "30000".into(), "0".into()]);
        }
        // A release that knows its fence and names no `next` may send the
        // lock's name alone (relaylock does); half the cases do.
        let keys = if way != 2 && case / 2 % 2 == 0 {
            vec![key.to_string()]
        } else {
            let mut keys = keys.clone();
            keys.push(format!("{key}:void:nx"));
            keys
        };
        let reply: Vec<i64> = admin
            .eval(relaylock::__scripts::RELEASE, keys, args)
            .await
            .unwrap();
        let ring = expected(&fence, &ring, cap);
        let want = match way {
            0 => format!("-{fence}||{ring}|{void}"),
            1 => format!(
                "~a b:{fence}:{}|cc|{ring}|{void}",
                relaylock::__scripts::SIDE_RETENTION_MS
            ),
            _ => format!("nx:{}||{ring}|{void}", -reply[0]),
        };
        // Freed, reserved for another client, given to `next` (`-fence'`).
        match way {
            2 => assert!(reply[0] < 0, "case {case}: the reply {reply:?}"),
            _ => assert_eq!(reply, [[1], [3]][way], "case {case}: the reply"),
        }
        let value: String = admin.get(key).await.unwrap();
        assert_eq!(value, want, "case {case}: fence {fence}, cap {cap}");
    }
}

#[tokio::test]
async fn bad_arguments_are_typed_errors() {
    let server = RedisServer::start();
    let lock = client(&server).await;
    let invalid = |r: &relaylock::Result<_>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(&lock.lock("").await.map(|_| ())));
    assert!(invalid(&lock.try_lock("").await.map(|_| ())));
    assert!(invalid(&lock.is_locked("").await.map(|_| ())));
    let long = "k".repeat(relaylock::MAX_KEY_LEN + 1);
    assert!(invalid(&lock.lock(&long).await.map(|_| ())));
    let max = "k".repeat(relaylock::MAX_KEY_LEN);
    lock.lock(&max).await.unwrap().release().await.unwrap();
    for lease in [
        Duration::ZERO,
        relaylock::MAX_LEASE + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let r = lock
            .lock_with("k", LockOptions::default().lease(lease))
            .await;
        assert!(invalid(&r.map(|_| ())), "lease {lease:?}");
    }
    // A wait too long to be a deadline means "no deadline", not a panic.
    lock.lock_with("k", LockOptions::default().wait(Duration::MAX))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Keys with braces, spaces, unicode are fine.
    for key in ["{x}", "a b", "ü🔒", "}", "{", "x}:fence"] {
        let g = lock.lock(key).await.unwrap();
        assert_eq!(g.key(), key);
        g.release().await.unwrap();
    }
    let g = lock.lock("k").await.unwrap();
    assert!(invalid(&g.extend(Duration::ZERO).await));
    g.release().await.unwrap();

    for url in ["not a url", "", "redis://", "http://127.0.0.1:6379"] {
        let r = LockClient::connect(url).await.map(|_| ());
        assert!(invalid(&r), "url {url:?} gave {r:?}");
    }
    for prefix in ["", "a{b}", "x}"] {
        let r = LockClient::builder()
            .url(server.url())
            .prefix(prefix)
            .build()
            .await;
        assert!(invalid(&r.map(|_| ())), "prefix {prefix:?}");
    }
    let r = LockClient::builder()
        .url(server.url())
        .default_lease(Duration::ZERO)
        .build()
        .await;
    assert!(invalid(&r.map(|_| ())));
    let r = LockClient::builder()
        .url(server.url())
        .wait_strategy(relaylock::WaitStrategy::Poll(Duration::ZERO))
        .build()
        .await;
    assert!(invalid(&r.map(|_| ())));
}

#[tokio::test]
async fn unreachable_server_fails_within_the_connect_timeout() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let start = Instant::now();
    let r = LockClient::builder()
        .url(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await;
    let took = start.elapsed();
    assert!(r.is_err(), "connected to a closed port");
    assert!(!matches!(r, Err(Error::InvalidArgument(_))));
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// The spin-polling baseline is still a correct lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poll_strategy_is_a_correct_lock() {
    let server = RedisServer::start();
    let lock = LockClient::builder()
        .url(server.url())
        .wait_strategy(relaylock::WaitStrategy::Poll(Duration::from_millis(2)))
        .build()
        .await
        .unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (lock, inside) = (lock.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let g = lock.lock("k").await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A client built on an existing fred client shares its connection.
#[tokio::test]
async fn builds_on_an_existing_fred_client() {
    let server = RedisServer::start();
    let fred = Builder::from_config(Config::from_url(&server.url()).unwrap())
        .build()
        .unwrap();
    fred.init().await.unwrap();
    let lock = LockClient::builder()
        .fred_client(fred.clone())
        .prefix("app")
        .build()
        .await
        .unwrap();
    let g = lock.lock("k").await.unwrap();
    assert!(support::taken(&fred, "app:3:{k}").await);
    g.release().await.unwrap();
    drop(lock);
    let pong: String = fred.ping(None).await.unwrap();
    assert_eq!(
        pong, "PONG",
        "relaylock must not quit a client it does not own"
    );
}

/// An acquisition abandoned in flight is released with an unknown fence; if
/// it had not taken the lock, a delayed copy of it must never take it later:
/// not when the key was absent, and not after the lock it found held changed
/// hands (the value carries the `void` field through every transition).
#[tokio::test]
async fn abandoned_acquisition_can_never_succeed_later() {
    use relaylock::__scripts::{
        ACQUIRE, HANDOFF_GRACE_MS, LOCK_RING_CHARS, RELEASE, SIDE_RETENTION_MS,
    };
    let server = RedisServer::start();
    let admin = server.admin().await;
    let keys = |key: &str, token: &str| {
        vec![
            key.to_string(),
            format!("{key}:void:{token}"),
            format!("{key}:void"),
        ]
    };
    // ACQUIRE of `token` with a lease in ms (its reply: the fence when
    // taken, `-1` when refused for the token's void marker); RELEASE with a
    // fence ("" when abandoned).
    let acquire = |key: &'static str, token: &'static str, lease: u64| {
        let (admin, keys) = (admin.clone(), keys(key, token));
        async move {
            let args = vec![
                token.to_string(),
                lease.to_string(),
                String::new(),
                format!("{key}:ch"),
                "PUBLISH".into(),
            ];
            admin
                .eval::<Vec<i64>, _, _, _>(ACQUIRE, keys, args)
                .await
                .unwrap()
        }
    };
    let release = |key: &'static str, token: &'static str, fence: String| {
        let (admin, keys) = (admin.clone(), keys(key, token));
        async move {
            let args: Vec<String> = vec![
                token.into(),
                fence,
                format!("{key}:ch"),
                SIDE_RETENTION_MS.to_string(),
                LOCK_RING_CHARS.to_string(),
                "me".into(),
                HANDOFF_GRACE_MS.to_string(),
                "PUBLISH".into(),
                "0".into(),
            ];
            admin
                .eval::<i64, _, _, _>(RELEASE, keys, args)
                .await
                .unwrap()
        }
    };

    // The orphan release arrives first and finds nothing.
    let key = "p:2:{k}";
    assert_eq!(release(key, "tok", String::new()).await, 0);
    let ttl: i64 = admin.pttl("p:2:{k}:void:tok").await.unwrap();
    assert!(ttl > 0 && ttl <= SIDE_RETENTION_MS as i64);
    // The delayed acquire of the same token is refused; another token is not.
    assert_eq!(acquire(key, "tok", 30_000).await, vec![-1]);
    assert!(
        !support::taken(&admin, key).await,
        "the abandoned acquisition took the lock"
    );
    assert!(acquire(key, "other", 30_000).await[0] > 0);

    // The orphan release finds the lock held by another token, which then
    // releases it: the tombstone still makes the delayed copy check.
    let key = "p:2:{j}";
    let held = acquire(key, "h", 30_000).await;
    assert!(held[0] > 0);
    assert_eq!(release(key, "tok", String::new()).await, 0);
    assert_eq!(release(key, "h", held[0].to_string()).await, 1);
    assert_eq!(acquire(key, "tok", 30_000).await, vec![-1]);
    let next = acquire(key, "n", 30_000).await;
    assert!(next[0] > held[0], "fences keep increasing");

    // The value the orphan release marked expires with its holder's lease,
    // and another owner takes and releases the lock meanwhile: the marker
    // still holds (found in review: the `void` field was lost with the
    // value).
    let key = "p:2:{e}";
    assert!(acquire(key, "h", 200).await[0] > 0);
    assert_eq!(release(key, "late", String::new()).await, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !support::taken(&admin, key).await,
        "the lease did not run out"
    );
    let d = acquire(key, "d", 30_000).await;
    assert!(d[0] > 0);
    assert_eq!(release(key, "d", d[0].to_string()).await, 1);
    assert_eq!(
        acquire(key, "late", 30_000).await,
        vec![-1],
        "the delayed copy took the lock"
    );

    // An abandoned acquisition that did take the lock is released and voided
    // too: a second copy of it (a replay beside the original) cannot take
    // the lock again after the release.
    let key = "p:2:{twice}";
    assert!(acquire(key, "tw", 30_000).await[0] > 0);
    assert_eq!(release(key, "tw", String::new()).await, 1);
    assert_eq!(
        acquire(key, "tw", 30_000).await,
        vec![-1],
        "a second copy retook the lock"
    );
}

/// A user whose ACL forbids the release channel cannot subscribe: its
/// waiters fall back to polling (every 100 ms) instead of sleeping until the
/// lease ends, and never believe a failed subscription confirmed.
#[tokio::test]
async fn waiters_poll_when_subscribing_is_denied() {
    denied_waiter_rounds(
        Duration::from_secs(4),
        async |_| {},
        |round, waited, _| {
            assert!(
                waited < Duration::from_millis(1500),
                "round {round}: took {waited:?}"
            );
        },
    )
    .await;
}

/// The same denied user after its subscriber connection was killed: the
/// reconnect resubscribes every channel its waiters want, the denied one
/// too, and must not count that one confirmed (found in review: a plain
/// PING behind all the SUBSCRIBEs got PONG after the refusal had been
/// dropped, so the waiter slept until the holder's lease instead of
/// polling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_channel_stays_unconfirmed_after_a_subscriber_reconnect() {
    denied_waiter_rounds(
        Duration::from_secs(5),
        async |admin| {
            // Kill the limited client's connections (its subscriber is not
            // in pub/sub mode: every SUBSCRIBE was refused), and give the
            // reconnect and resubscription time to finish.
            support::client_kill(admin, &["USER", "nosub"]).await;
            tokio::time::sleep(Duration::from_millis(500)).await;
        },
        |round, _, after_release| {
            assert!(
                after_release < Duration::from_millis(1000),
                "round {round}: acquired {after_release:?} after the release"
            );
        },
    )
    .await;
}

/// Three rounds of the denied-subscription tests: a holder takes "k" for
/// 6 s, a client whose user may use no channel waits for it (at most
/// `wait`), `before_release` runs once the waiter is queued, then the holder
/// releases. `check(round, waited, after_release)` judges how long the
/// waiter waited in all and after the release.
async fn denied_waiter_rounds(
    wait: Duration,
    before_release: impl AsyncFn(&Client),
    check: impl Fn(usize, Duration, Duration),
) {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = client(&server).await;
    let limited = support::channel_denied_client(&admin, &server).await;
    for round in 0..3 {
        let holder = holder_client
            .lock_with("k", LockOptions::default().lease(Duration::from_secs(6)))
            .await
            .unwrap();
        let waiter = {
            let limited = limited.clone();
            tokio::spawn(async move {
                let start = Instant::now();
                let g = limited
                    .lock_with("k", LockOptions::default().wait(wait))
                    .await;
                (g.map(|g| g.fencing_token()), start, Instant::now())
            })
        };
        support::until_queued(&admin, &limited, "k").await;
        before_release(&admin).await;
        let released = Instant::now();
        holder.release().await.unwrap();
        let (got, start, at) = waiter.await.unwrap();
        got.unwrap_or_else(|e| panic!("round {round}: {e}"));
        check(round, at - start, at - released);
        // The limited client cannot publish its own release: its guard was
        // dropped, so clear the key for the next round.
        let _: i64 = admin.del(holder_client.redis_key("k")).await.unwrap();
    }
}

/// After the subscriber connection is killed, every channel its waiters
/// want is subscribed again in one pipeline behind one nonce PING (one round
/// trip, not one per channel), and every waiter is woken by its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_resubscribes_every_channel_in_one_round_trip() {
    const KEYS: usize = 20;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder = client(&server).await;
    let waiting = client(&server).await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("many:{i}")).collect();
    let mut held = Vec::new();
    for k in &keys {
        held.push(
            holder
                .lock_with(k, LockOptions::default().lease(Duration::from_secs(30)))
                .await
                .unwrap(),
        );
    }
    let mut waiters = Vec::new();
    for k in &keys {
        let (w, k) = (waiting.clone(), k.clone());
        waiters.push(tokio::spawn(async move {
            w.lock_with(&k, LockOptions::default().wait(Duration::from_secs(10)))
                .await
        }));
    }
    let pattern = "*{many:*".to_owned();
    assert!(
        eventually(Duration::from_secs(5), || async {
            support::channels(&admin, &pattern).await.len() == KEYS
        })
        .await
    );
    let before = command_calls(&admin).await;
    support::client_kill(&admin, &["TYPE", "pubsub"]).await;
    assert!(
        eventually(Duration::from_secs(5), || async {
            support::channels(&admin, &pattern).await.len() == KEYS
        })
        .await,
        "not every channel came back"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = command_calls(&admin).await;
    let (subscribes, pings) = (
        delta(&before, &after, "subscribe"),
        delta(&before, &after, "ping"),
    );
    println!("resubscription of {KEYS} channels: {subscribes} SUBSCRIBE, {pings} PING");
    // And each of the two clients' control channel (an operator's unlock).
    assert_eq!(subscribes, KEYS as u64 + 2);
    // One PING confirms them all; fred sends one when it connects, and a
    // heartbeat may add one. One per channel would be 20 more.
    assert!(pings <= 3, "{pings} PINGs for {KEYS} channels");
    let released = Instant::now();
    for g in held {
        g.release().await.unwrap();
    }
    for w in waiters {
        w.await.unwrap().unwrap().release().await.unwrap();
    }
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "{:?}",
        released.elapsed()
    );
}

/// A sleeper bounded by an old, long lease learns from another local waiter
/// that the current holder's lease is shorter, and takes the lock when that
/// one ends instead of when the old one would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleepers_learn_a_shorter_lease_from_other_waiters() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = client(&server).await;
    let lock = client(&server).await;
    let key = lock.redis_key("k");
    let holder = holder_client
        .lock_with("k", LockOptions::default().lease(Duration::from_secs(20)))
        .await
        .unwrap();
    let start = Instant::now();
    // B queues first, with a short deadline; A second, with a long one.
    let b = {
        let lock = lock.clone();
        tokio::spawn(async move {
            lock.lock_with(
                "k",
                LockOptions::default().wait(Duration::from_millis(1500)),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock
                .lock_with("k", LockOptions::default().wait(Duration::from_secs(8)))
                .await;
            (g, start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The holder is replaced by a foreign owner with a 1 s lease, and a
    // release is published: B (first in line) wakes, sees the 1 s lease,
    // then gives up at its deadline without anybody releasing.
    std::mem::forget(holder);
    let _: Value = admin
        .eval(
            "redis.call('SET', KEYS[1], 'foreign:1', 'PX', 1000) redis.call('PUBLISH', ARGV[1], 'x') return 1",
            vec![key.clone()],
            // The lock's channel for `lock`'s client (protocol 3).
            vec![format!("{key}:ch:{}", lock.client_id())],
        )
        .await
        .unwrap();
    assert!(matches!(b.await.unwrap(), Err(Error::Timeout { .. })));
    let (g, at) = a.await.unwrap();
    let g = g.expect("A never took the lock");
    assert!(
        at < Duration::from_secs(4),
        "A slept on the old 20 s lease: acquired after {at:?}"
    );
    g.release().await.unwrap();
}

/// With a fred client that has no command timeout of its own, relaylock's
/// calls are still bounded: a frozen Redis (SIGSTOP) gives an error, not a hang.
#[tokio::test]
async fn frozen_redis_gives_an_error_not_a_hang() {
    let server = RedisServer::start();
    let lock = support::client_on_untimed_fred(&server.url(), Duration::from_millis(500)).await;
    let pid = server.pid().unwrap().to_string();
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    assert!(stop.success());
    let start = Instant::now();
    let r = lock.lock("k").await;
    let took = start.elapsed();
    let cont = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap();
    assert!(cont.success());
    assert!(matches!(r, Err(Error::Redis(_))), "{r:?}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    // And it recovers once Redis runs again.
    let g = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    g.release().await.unwrap();
}

/// Two clients (two processes, in effect) contend for one key. Redis delivers
/// a release to subscribers in subscription order, so without hand-over the
/// client that subscribed first would win nearly every race. With it, clients
/// take turns, and a release costs one retry in total, not one per client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_take_turns_and_retry_once_per_release() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let clients = [client(&server).await, client(&server).await];
    let before = command_calls(&admin).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for _ in 0..16 {
            let (c, stop) = (c.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let g = c.lock("shared").await.unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    g.release().await.unwrap();
                    n += 1;
                }
                (i, n)
            }));
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let mut per_client = [0u64; 2];
    for t in tasks {
        let (i, n) = t.await.unwrap();
        per_client[i] += n;
    }
    let after = command_calls(&admin).await;
    let total = per_client[0] + per_client[1];
    let attempts = delta(&before, &after, "evalsha") - total;
    let share = per_client[0].min(per_client[1]) as f64 / per_client[0].max(per_client[1]) as f64;
    println!(
        "clients_take_turns: acquisitions per client {per_client:?}, min/max {share:.3}, {:.3} acquire calls per acquisition",
        attempts as f64 / total as f64
    );
    assert!(share >= 0.7, "one client starves the other: {per_client:?}");
    assert!(
        (attempts as f64 / total as f64) <= 1.3,
        "{attempts} acquire calls for {total} acquisitions"
    );
}

/// A client that is queued but whose process died never takes its
/// reservation: the lock idles for the grace period only, and the no-show
/// leaves the queue. A client whose waiters left takes itself out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_no_show_costs_one_grace_period() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let name = holder_client.redis_key("k");
    let holder = holder_client.lock("k").await.unwrap();
    // A ghost that started waiting long ago, ahead of everyone.
    assert!(support::edit_queue(&admin, &name, "ghost", true).await);
    let waiter = {
        let c = waiter_client.clone();
        tokio::spawn(async move {
            let g = c
                .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
                .await;
            (g, Instant::now())
        })
    };
    support::until_queued(&admin, &waiter_client, "k").await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let (g, at) = waiter.await.unwrap();
    let g = g.expect("the waiter behind the ghost never acquired");
    let took = at - released;
    assert!(
        took < Duration::from_millis(1000),
        "took {took:?} (grace is {} ms)",
        relaylock::__scripts::HANDOFF_GRACE_MS
    );
    assert!(
        !support::is_queued(&admin, &name, "ghost").await,
        "the no-show is still queued"
    );
    g.release().await.unwrap();

    // A waiter that gives up takes its client out of the queue.
    let holder = holder_client.lock("k").await.unwrap();
    let r = waiter_client
        .lock_with("k", LockOptions::default().wait(Duration::from_millis(200)))
        .await;
    assert!(matches!(r, Err(Error::Timeout { .. })));
    let emptied = eventually(Duration::from_secs(3), || async {
        support::lock_value(&admin, &name)
            .await
            .is_some_and(|v| v.queue.is_empty())
    })
    .await;
    assert!(
        emptied,
        "queue left behind: {:?}",
        support::lock_value(&admin, &name).await
    );
    holder.release().await.unwrap();
}

/// Client C waits for a key, and its queue entry disappears (as a clean-up
/// race or an expired value can make it) while clients A and B then hand
/// the key to each other continuously. C must queue again and get its turn
/// within about a lease (1 s here), not starve for as long as A and B go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_fell_out_of_the_queue_queues_again() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let name = a.redis_key("k");
    let lease = || LockOptions::default().lease(Duration::from_secs(1));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ping_pong = |cl: &LockClient| {
        let (cl, stop) = (cl.clone(), stop.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let g = cl.lock_with("k", lease()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.release().await.unwrap();
            }
        })
    };
    // A holds; B's tasks and C queue behind it.
    let first = a.lock_with("k", lease()).await.unwrap();
    let mut loops: Vec<_> = (0..4).map(|_| ping_pong(&b)).collect();
    let waiter = {
        let c = c.clone();
        tokio::spawn(async move { c.lock_with("k", lease().wait(Duration::from_secs(5))).await })
    };
    let c_id = c.client_id().to_owned();
    let queued = eventually(Duration::from_secs(3), || async {
        support::is_queued(&admin, &name, &c_id).await
    })
    .await;
    assert!(queued, "C never queued");
    let b_id = b.client_id().to_owned();
    let b_queued = eventually(Duration::from_secs(3), || async {
        support::is_queued(&admin, &name, &b_id).await
    })
    .await;
    assert!(b_queued, "B never queued");
    loops.extend((0..4).map(|_| ping_pong(&a)));
    let a_id = a.client_id().to_owned();
    let a_queued = eventually(Duration::from_secs(3), || async {
        support::is_queued(&admin, &name, &a_id).await
    })
    .await;
    assert!(a_queued, "A never queued");
    // C falls out of the queue; then A and B start handing the key over,
    // always to each other (each is queued when the other releases).
    assert!(support::edit_queue(&admin, &name, &c_id, false).await);
    let start = Instant::now();
    first.release().await.unwrap();
    let got = waiter.await.unwrap();
    let took = start.elapsed();
    let g = got.unwrap_or_else(|e| panic!("C starved after falling out of the queue: {e}"));
    g.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for l in loops {
        l.await.unwrap();
    }
    assert!(took < Duration::from_secs(3), "took {took:?}");
}

/// A first try abandoned while in flight may have queued its client: the
/// client is taken out again, so the next release does not reserve the lock
/// for a client with nobody waiting (which would idle it for the grace).
#[tokio::test]
async fn an_abandoned_first_try_leaves_no_ghost_in_the_queue() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = client(&server).await;
    let lock = client(&server).await;
    let key = lock.redis_key("k");
    let holder = holder_client.lock("k").await.unwrap();
    for _ in 0..5 {
        // Polled once (the try is sent and queues the client), then dropped.
        let r = tokio::time::timeout(Duration::ZERO, lock.lock("k")).await;
        assert!(r.is_err());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    let value = support::lock_value(&admin, &key).await.unwrap();
    assert!(
        value.is_free(),
        "the release reserved the lock for a client with nobody waiting: {value:?}"
    );
}

/// A user that may not run CLIENT (a common hardening): fred cannot read the
/// connection's `CLIENT ID`, and subscriptions must still be confirmed, so a
/// waiter sleeps instead of polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_confirm_without_client_id() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    support::acl_user(&admin, "nocid", &["~*", "&*", "+@all", "-client"]).await;
    let holder_client = client(&server).await;
    let limited = LockClient::builder()
        .url(format!("redis://nocid:pw@127.0.0.1:{}", server.port))
        .build()
        .await
        .unwrap();
    let g = holder_client
        .lock_with("k", LockOptions::default().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let waiter = {
        let limited = limited.clone();
        tokio::spawn(async move { limited.lock("k").await })
    };
    let channel = format!("{}:ch", limited.redis_key("k"));
    support::until_subscribers(&admin, &channel, 1).await;
    let before = command_calls(&admin).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = command_calls(&admin).await;
    let tries = delta(&before, &after, "evalsha");
    assert!(
        tries <= 2,
        "{tries} tries in 2 s: the waiter is polling, its subscription unconfirmed"
    );
    let released = Instant::now();
    g.release().await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert!(released.elapsed() < Duration::from_secs(1));
    got.release().await.unwrap();
}

/// The queue-times record (`scripts::QUEUE_TIMES`): a client that joins the
/// queue of a held lock is noted with the server time, once (a queued
/// client's refused try keeps its time and refreshes the TTL, within the
/// retention); past 32 fields and twice the queue, a join drops the fields of
/// clients no longer queued; a caller that does not wait (`client` "") is
/// never noted.
#[tokio::test]
async fn the_queue_times_record_notes_joins_and_prunes_leavers() {
    use relaylock::__scripts::{ACQUIRE, QUEUE_TIMES};
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = "p:2:{qt}";
    let times = format!("{lock}{QUEUE_TIMES}");
    let _: () = admin
        .set(
            lock,
            "holder:1|||",
            Some(Expiration::PX(60_000)),
            None,
            false,
        )
        .await
        .unwrap();
    let try_as = |client: String| {
        let (admin, times) = (admin.clone(), times.clone());
        async move {
            let keys = vec![
                lock.to_string(),
                format!("{lock}:void:t-{client}"),
                format!("{lock}:void"),
                times,
            ];
            let args = vec![
                format!("t-{client}"),
                "1000".to_string(),
                client,
                format!("{lock}:ch"),
                "PUBLISH".into(),
                "5000".into(),
            ];
            let reply: Vec<i64> = admin.eval(ACQUIRE, keys, args).await.unwrap();
            assert!(reply[0] < 0, "the lock is held: {reply:?}");
        }
    };
    try_as(String::new()).await;
    let exists: i64 = admin.exists(&times).await.unwrap();
    assert_eq!(exists, 0, "a caller that does not wait was noted");
    try_as("c0".into()).await;
    let first: String = admin.hget(&times, "c0").await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    try_as("c0".into()).await;
    let again: String = admin.hget(&times, "c0").await.unwrap();
    assert_eq!(first, again, "a queued client's refused try moved its time");
    let ttl: i64 = admin.pttl(&times).await.unwrap();
    assert!(ttl > 0 && ttl <= 5000, "ttl {ttl}");
    for i in 1..50 {
        try_as(format!("c{i}")).await;
    }
    let n: i64 = admin.hlen(&times).await.unwrap();
    assert_eq!(n, 50);
    // All but five leave the queue (as LEAVE or a hand-over would).
    let _: () = admin
        .set(lock, "holder:1|c0,c1,c2,c3,c4||", None, None, false)
        .await
        .unwrap();
    try_as("late".into()).await;
    let mut left: Vec<String> = admin.hkeys(&times).await.unwrap();
    left.sort();
    assert_eq!(left, ["c0", "c1", "c2", "c3", "c4", "late"]);
}
