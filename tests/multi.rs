//! Multi-key locks against a real redis-server: one request to take and one
//! to release whatever the number of keys; keys deduplicated and taken in
//! one global order, so callers naming them in opposite orders never
//! deadlock; each key an ordinary lock in its FIFO queue, shared with
//! single-key calls; one deadline for the set; cancellation at any point
//! leaving no key held; typed errors for bad sets.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{Error, LockClient, LockOptions, MAX_KEYS};
use support::{Admin, RedisServer};

/// Whether any of `keys` is still held in Redis (its value present and not
/// a tombstone).
async fn any_taken(admin: &Client, client: &LockClient, keys: &[String]) -> bool {
    for k in keys {
        if support::taken(admin, &client.redis_key(k)).await {
            return true;
        }
    }
    false
}

/// Uncontended, k keys cost one script call to take and one to release,
/// for any k; every key holds the one token, and each has its own fence.
#[tokio::test]
async fn a_free_set_costs_one_request_to_take_and_one_to_release() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    for k in [1usize, 2, 7, 100] {
        let keys: Vec<String> = (0..k).map(|i| format!("set{k}:{i}")).collect();
        let before = support::command_runs(&admin).await;
        let g = lock.lock_all(&keys).await.unwrap();
        let taken = support::command_runs(&admin).await;
        assert_eq!(
            support::delta(&before, &taken, "evalsha"),
            1,
            "{k} keys: one call"
        );
        assert_eq!(g.len(), k);
        for key in &keys {
            let value: String = admin.get(lock.redis_key(key)).await.unwrap();
            assert_eq!(value, g.token(), "{key} holds the set's token");
            assert!(g.fencing_token(key).unwrap() > 0);
        }
        assert!(g.is_held());
        g.release().await.unwrap();
        let released = support::command_runs(&admin).await;
        assert_eq!(
            support::delta(&taken, &released, "evalsha"),
            1,
            "{k} keys: one release"
        );
        assert!(!any_taken(&admin, &lock, &keys).await);
    }
}

/// The keys come back deduplicated and in one order (hash slot, then key)
/// whatever order they were given in; `fencing_token` answers per key.
#[tokio::test]
async fn keys_are_deduplicated_and_ordered_by_slot_then_key() {
    let server = RedisServer::start();
    let lock = support::client(&server.url()).await;
    let a = lock.lock_all(["b", "a", "c", "a", "b"]).await.unwrap();
    let order: Vec<String> = a.keys().map(str::to_owned).collect();
    a.release().await.unwrap();
    let b = lock.lock_all(["c", "b", "a"]).await.unwrap();
    let again: Vec<String> = b.keys().map(str::to_owned).collect();
    assert_eq!(order.len(), 3);
    assert_eq!(order, again, "one order whatever the caller's");
    let slot = |k: &str| fred::util::redis_keyslot(lock.redis_key(k).as_bytes());
    assert!(order
        .windows(2)
        .all(|w| (slot(&w[0]), &w[0]) < (slot(&w[1]), &w[1])));
    assert_eq!(b.fencing_token("zzz"), None);
    assert_eq!(b.fencing_tokens().count(), 3);
    b.release().await.unwrap();
}

/// Bad sets are typed errors, before anything is sent.
#[tokio::test]
async fn empty_oversized_and_bad_sets_are_typed_errors() {
    let server = RedisServer::start();
    let lock = support::client(&server.url()).await;
    let none: [&str; 0] = [];
    assert!(matches!(
        lock.lock_all(none).await,
        Err(Error::InvalidArgument(_))
    ));
    let many: Vec<String> = (0..=MAX_KEYS).map(|i| format!("k{i}")).collect();
    assert!(matches!(
        lock.lock_all(&many).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        lock.try_lock_all(["a", ""]).await,
        Err(Error::InvalidArgument(_))
    ));
    let replicas = LockOptions::default().min_replicas(1, Duration::from_millis(10));
    assert!(matches!(
        lock.lock_all_with(["a"], replicas).await,
        Err(Error::InvalidArgument(_))
    ));
    let zero = LockOptions::default().lease(Duration::ZERO);
    assert!(matches!(
        lock.lock_all_with(["a"], zero).await,
        Err(Error::InvalidArgument(_))
    ));
    // Nothing was taken by any of them.
    assert!(lock.try_lock_all(["a"]).await.unwrap().is_some());
}

/// Many tasks in two clients, each locking the same keys in its own random
/// order, mixed with single-key locks of the same keys: every call
/// completes (no deadlock), and no key ever has two holders.
#[tokio::test]
async fn opposite_orders_never_deadlock_and_never_share_a_key() {
    let server = RedisServer::start();
    let clients = [
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    ];
    let keys: Vec<String> = (0..6).map(|i| format!("acct:{i}")).collect();
    let busy: Arc<Vec<AtomicBool>> = Arc::new((0..6).map(|_| AtomicBool::new(false)).collect());
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..16u64 {
        let lock = clients[(t % 2) as usize].clone();
        let (keys, busy, done) = (keys.clone(), Arc::clone(&busy), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let mut rng = support::Lcg(t * 7919 + 1);
            for round in 0..15 {
                let opts = LockOptions::default().wait(Duration::from_secs(20));
                if (t + round) % 4 == 0 {
                    let i = rng.below(6) as usize;
                    let g = lock.lock_with(&keys[i], opts).await.unwrap();
                    assert!(!busy[i].swap(true, Ordering::SeqCst), "two holders of {i}");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    busy[i].store(false, Ordering::SeqCst);
                    g.release().await.unwrap();
                } else {
                    let n = 2 + rng.below(4) as usize;
                    let mut mine: Vec<usize> = (0..n).map(|_| rng.below(6) as usize).collect();
                    // The caller's own order: reversed half the time.
                    if round % 2 == 1 {
                        mine.reverse();
                    }
                    let names: Vec<&String> = mine.iter().map(|&i| &keys[i]).collect();
                    let g = lock.lock_all_with(names, opts).await.unwrap();
                    let held: Vec<usize> = g
                        .keys()
                        .map(|k| keys.iter().position(|x| x == k).unwrap())
                        .collect();
                    for &i in &held {
                        assert!(!busy[i].swap(true, Ordering::SeqCst), "two holders of {i}");
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    for &i in &held {
                        busy[i].store(false, Ordering::SeqCst);
                    }
                    g.release().await.unwrap();
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let all = tokio::time::timeout(Duration::from_secs(60), async {
        for t in tasks {
            t.await.unwrap();
        }
    })
    .await;
    assert!(
        all.is_ok(),
        "stalled after {} calls",
        done.load(Ordering::Relaxed)
    );
    let admin = server.admin().await;
    assert!(
        !any_taken(&admin, &clients[0], &keys).await,
        "every key free at the end"
    );
}

/// A multi-key call waits on its first busy key in that key's FIFO queue,
/// keeping the keys before it; the single-key holder's release hands the
/// key over and the call completes with the rest. The reverse: a single
/// `lock` of a key a multi-key hold has waits for its release.
#[tokio::test]
async fn a_busy_key_parks_the_set_and_single_locks_wait_for_a_set() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (one, two) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let single = one.lock("m").await.unwrap();
    let set = {
        let two = two.clone();
        tokio::spawn(async move { two.lock_all(["a", "m", "z"]).await.unwrap() })
    };
    support::until_queued(&admin, &two, "m").await;
    assert!(!set.is_finished());
    let released = Instant::now();
    single.release().await.unwrap();
    let set = set.await.unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "woken, not a lease later"
    );
    assert_eq!(set.len(), 3);
    // The reverse.
    let waiter = {
        let one = one.clone();
        tokio::spawn(async move { one.lock("z").await.unwrap() })
    };
    support::until_queued(&admin, &one, "z").await;
    assert!(!waiter.is_finished());
    set.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    got.expect("the single lock was handed the key")
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// One deadline for the whole set: a set whose last key stays busy times
/// out within the wait, naming that key, and leaves none of its keys held.
#[tokio::test]
async fn one_deadline_for_the_set_and_nothing_held_after_it() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (one, two) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let _blocker = one.lock("k9").await.unwrap();
    let started = Instant::now();
    let opts = LockOptions::default().wait(Duration::from_millis(300));
    let out = two.lock_all_with(["k1", "k2", "k9"], opts).await;
    assert!(
        matches!(&out, Err(Error::Timeout { key }) if key == "k9"),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    let keys = ["k1".to_owned(), "k2".to_owned()];
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            !any_taken(&admin, &two, &keys).await
        })
        .await,
        "the keys taken before the busy one are released"
    );
    // try_lock_all: None, and nothing held once it answered.
    assert!(two.try_lock_all(["k1", "k9"]).await.unwrap().is_none());
    assert!(!any_taken(&admin, &two, &keys).await);
}

/// A fixed lease (no watchdog) counts from when the set was complete: the
/// keys taken before a wait get their whole lease again.
#[tokio::test]
async fn a_fixed_lease_counts_from_the_complete_set() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (one, two) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let blocker = one.lock("f9").await.unwrap();
    let lease = Duration::from_millis(1500);
    let call = {
        let two = two.clone();
        tokio::spawn(async move {
            two.lock_all_with(["f1", "f9"], LockOptions::default().lease(lease))
                .await
                .unwrap()
        })
    };
    support::until_queued(&admin, &two, "f9").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    blocker.release().await.unwrap();
    let g = call.await.unwrap();
    let ttl: i64 = admin.pttl(two.redis_key("f1")).await.unwrap();
    assert!(ttl > 1000, "f1's lease was renewed in full: {ttl} ms left");
    assert!(g.is_held());
    g.release().await.unwrap();
}

/// Dropping a multi-key call at any point (here: at a sweep of instants
/// while it waits for a busy key, and while its first call is in flight)
/// leaves no key held and no queue entry.
#[tokio::test]
async fn a_dropped_call_leaves_no_key_held_and_no_queue_entry() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (one, two) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let blocker = one.lock("q5").await.unwrap();
    let keys: Vec<String> = ["q1", "q2", "q5", "q7"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for wait_ms in [0u64, 1, 2, 5, 20, 50] {
        let call = two.lock_all(&keys);
        let _ = tokio::time::timeout(Duration::from_millis(wait_ms), call).await;
    }
    support::poll_once_and_drop(two.lock_all(&keys)).await;
    let mine = ["q1".to_owned(), "q2".to_owned(), "q7".to_owned()];
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            !any_taken(&admin, &two, &mine).await
                && !support::is_queued(&admin, &two.redis_key("q5"), two.client_id()).await
        })
        .await,
        "keys released and queue left"
    );
    blocker.release().await.unwrap();
    // All free: a new set takes them at once.
    let g = tokio::time::timeout(Duration::from_secs(5), two.lock_all(&keys))
        .await
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
}

/// Dropping a guard releases every key (in the background); `lost` fires
/// when any key is lost, and `release` then reports `LockLost` naming it,
/// while the other keys are still released.
#[tokio::test]
async fn a_lost_key_fires_lost_and_release_reports_it() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let keys = ["d1".to_owned(), "d2".to_owned(), "d3".to_owned()];
    drop(lock.lock_all(&keys).await.unwrap());
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            !any_taken(&admin, &lock, &keys).await
        })
        .await
    );
    let g = lock
        .lock_all_with(
            &keys,
            LockOptions::default().lease(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    let _: i64 = admin.del(lock.redis_key("d2")).await.unwrap();
    let token = g.lost_token();
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost fires once the lease ran out");
    tokio::time::timeout(Duration::from_secs(1), token.cancelled())
        .await
        .expect("and so does its token");
    assert!(!g.is_held());
    // d2 is gone; another client takes it meanwhile.
    let other = support::client(&server.url()).await;
    let d2 = other.lock("d2").await.unwrap();
    let out = g.release().await;
    assert!(
        matches!(&out, Err(Error::LockLost { key }) if key == "d2" || key == "d1" || key == "d3"),
        "{out:?}"
    );
    d2.release().await.unwrap();
}

/// `extend` sets every key's lease; `with_lock_all` runs its closure holding
/// every key and releases them after.
#[tokio::test]
async fn extend_and_with_lock_all() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let g = lock
        .lock_all_with(
            ["e1", "e2"],
            LockOptions::default().lease(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    let token = g.lost_token();
    g.extend(Duration::from_secs(60)).await.unwrap();
    assert!(!token.is_cancelled());
    for k in ["e1", "e2"] {
        let ttl: i64 = admin.pttl(lock.redis_key(k)).await.unwrap();
        assert!(ttl > 30_000, "{k}: {ttl}");
    }
    g.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(1), token.cancelled())
        .await
        .expect("the token is cancelled by the release");
    let fences = lock
        .with_lock_all(["w2", "w1"], LockOptions::default(), async |g| {
            g.fencing_tokens()
                .map(|(k, f)| (k.to_owned(), f))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap();
    assert_eq!(fences.len(), 2);
    let keys = ["w1".to_owned(), "w2".to_owned()];
    assert!(!any_taken(&admin, &lock, &keys).await);
}

/// 10,000 keys in one call: taken and released (one request each way);
/// the time is printed, not asserted (this machine is shared).
#[tokio::test]
async fn ten_thousand_keys_in_one_call() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let keys: Vec<String> = (0..MAX_KEYS).map(|i| format!("big:{i}")).collect();
    let before = support::command_runs(&admin).await;
    let started = Instant::now();
    let g = lock.lock_all(&keys).await.unwrap();
    let took = started.elapsed();
    assert_eq!(g.len(), MAX_KEYS);
    let started = Instant::now();
    g.release().await.unwrap();
    let released = started.elapsed();
    let after = support::command_runs(&admin).await;
    assert_eq!(support::delta(&before, &after, "evalsha"), 2);
    println!("10,000 keys: taken in {took:?}, released in {released:?}");
    assert!(!any_taken(&admin, &lock, &keys[..100]).await);
}

/// The watchdog renews a watched set with the client's other due locks:
/// one call per round for all its keys, not one per key.
#[tokio::test]
async fn the_watchdog_renews_a_set_in_one_call_per_round() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::preset(&server.url())
        .default_lease(Duration::from_millis(900))
        .build()
        .await
        .unwrap();
    let keys: Vec<String> = (0..50).map(|i| format!("w:{i}")).collect();
    let g = lock.lock_all(&keys).await.unwrap();
    let before = support::command_runs(&admin).await;
    tokio::time::sleep(Duration::from_millis(2700)).await;
    let after = support::command_runs(&admin).await;
    assert!(g.is_held());
    let calls = support::delta(&before, &after, "evalsha");
    let renewed = support::delta(&before, &after, "pexpire");
    println!("50 keys held for 3 leases: {calls} renewal calls, {renewed} PEXPIREs");
    // About one round per third of the lease (9 in 2.7 s), each renewing
    // 50 keys (and their records).
    assert!(calls <= 12, "{calls} calls: not one per round");
    assert!(
        renewed >= 50 * 2 * 4,
        "{renewed} PEXPIREs: the keys were not all renewed"
    );
    g.release().await.unwrap();
}
