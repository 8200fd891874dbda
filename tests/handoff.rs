//! The hand-over within one client: a release gives the lock straight to
//! the oldest local waiter's token (one request), and neither side's
//! cancellation leaves the lock held by nobody.

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use fred::clients::Client;
use relaylock::{Error, LockClient, LockGuard, LockOptions};
use support::{command_calls, delta, eventually, Admin, RedisServer};
use tokio::task::JoinHandle;

/// `client.lock_with("k", options)` in a task of its own: a local waiter.
fn spawn_waiter(
    client: &LockClient,
    options: LockOptions,
) -> JoinHandle<relaylock::Result<LockGuard>> {
    let client = client.clone();
    tokio::spawn(async move { client.lock_with("k", options).await })
}

/// Asserts that the lock `name` is free (absent, a tombstone or a lapsed
/// reservation) within `limit`; `what` names the case in the failure.
async fn assert_freed(admin: &Client, name: &str, limit: Duration, what: &str) {
    let freed = eventually(limit, || async { !support::taken(admin, name).await }).await;
    assert!(
        freed,
        "{what}: the lock is still held: {:?}",
        support::lock_value(admin, name).await
    );
}

/// Local waiters parked behind a holder of the same client: each hand-over
/// is the release alone. N hand-overs cost N + 1 releases and one LEAVE
/// (the client leaves the queue when its last waiter is gone), and no
/// acquire call; the fencing tokens increase along the chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_gives_the_lock_to_a_local_waiter_in_one_request() {
    const WAITERS: usize = 10;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let client = support::client(&server.url()).await;
    let name = client.redis_key("k");
    let held = client.lock("k").await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        let client = client.clone();
        let admin = admin.clone();
        let name = name.clone();
        waiters.push(tokio::spawn(async move {
            let g = client.lock("k").await.unwrap();
            // The value names this guard's token and fence: the grant was
            // written in Redis, not only reported.
            let value = support::lock_value(&admin, &name).await.expect("held");
            assert_eq!(value.token(), Some(g.token()));
            assert_eq!(value.fence(), Some(g.fencing_token()));
            let fence = g.fencing_token();
            g.release().await.unwrap();
            fence
        }));
    }
    support::until_queued(&admin, &client, "k").await;
    // All parked: their first tries and the subscription are done.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = command_calls(&admin).await;
    let first = held.fencing_token();
    held.release().await.unwrap();
    let mut fences = Vec::new();
    for w in waiters {
        fences.push(w.await.unwrap());
    }
    let expected = (WAITERS + 2) as u64;
    eventually(Duration::from_secs(2), || async {
        delta(&before, &command_calls(&admin).await, "evalsha") >= expected
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = command_calls(&admin).await;
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), WAITERS);
    assert!(fences[0] > first);
    assert_eq!(
        delta(&before, &after, "evalsha"),
        expected,
        "{WAITERS} hand-overs: not {} releases and one LEAVE",
        WAITERS + 1
    );
}

/// The waiter gives up (its deadline) while the release that hands it the
/// lock is in flight: the lock granted to it is released, not held until
/// its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_waiter_that_gives_up_during_the_hand_over_leaves_the_lock_free() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let client = support::client(&server.url()).await;
    let name = client.redis_key("k");
    let held = client.lock("k").await.unwrap();
    let waiter = spawn_waiter(
        &client,
        LockOptions::default().wait(Duration::from_millis(600)),
    );
    support::until_queued(&admin, &client, "k").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The release reaches a frozen server; the waiter's deadline passes
    // while its hand-over is in flight.
    server.pause();
    let release = tokio::spawn(async move { held.release().await });
    let timed_out = waiter.await.unwrap();
    assert!(
        matches!(timed_out, Err(Error::Timeout { .. })),
        "{timed_out:?}"
    );
    server.resume();
    release.await.unwrap().unwrap();
    let freed = Instant::now();
    assert_freed(
        &admin,
        &name,
        Duration::from_secs(3),
        "granted to a waiter that left",
    )
    .await;
    println!("freed {:?} after the resume", freed.elapsed());
    let next = client
        .try_lock("k")
        .await
        .unwrap()
        .expect("free for the next caller");
    next.release().await.unwrap();
}

/// The releaser's future is dropped while its release (which hands the
/// lock to a local waiter) is in flight: the waiter re-checks and finds the
/// lock its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_release_still_hands_the_lock_to_the_local_waiter() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let client = support::client(&server.url()).await;
    let name = client.redis_key("k");
    let held = client.lock("k").await.unwrap();
    let waiter = spawn_waiter(&client, LockOptions::default());
    support::until_queued(&admin, &client, "k").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.pause();
    // Sent, then dropped before the reply.
    let release = tokio::time::timeout(Duration::from_millis(100), held.release()).await;
    assert!(release.is_err(), "the release finished on a paused server");
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.resume();
    let resumed = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter never got the lock")
        .unwrap()
        .unwrap();
    println!(
        "the waiter had the lock {:?} after the resume",
        resumed.elapsed()
    );
    assert!(resumed.elapsed() < Duration::from_secs(2));
    let value = support::lock_value(&admin, &name).await.expect("held");
    assert_eq!(value.token(), Some(got.token()));
    got.release().await.unwrap();
    assert_freed(&admin, &name, Duration::from_secs(2), "released").await;
}

/// A release while the local waiter is still confirming its subscription
/// (its SUBSCRIBE and PING delayed on the network) does not hand it the
/// lock: the grant would sit unused until the subscription returned, and
/// `lock()` would then return a lease that had already run out. The
/// release wakes the waiter instead, and it takes the lock itself, with a
/// live lease, once it is subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_still_subscribing_gets_a_live_lease() {
    use support::proxy::{Mode, Proxy};
    let server = RedisServer::start();
    let admin = server.admin().await;
    let proxy = Proxy::start(server.port).await;
    let client = support::client(&proxy.url()).await;
    let name = client.redis_key("k");
    // Tag the subscriber connection (its first SUBSCRIBE), then slow it.
    {
        let held = client.lock("warm").await.unwrap();
        let w = support::spawn_waiter(&client, "warm");
        support::until_queued(&admin, &client, "warm").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.release().await.unwrap();
        w.await.unwrap();
    }
    proxy.set_subscriber_mode(Some(Mode::Delay(Duration::from_millis(800))));
    let held = client.lock("k").await.unwrap();
    let started = Instant::now();
    let waiter = spawn_waiter(
        &client,
        LockOptions::default().lease(Duration::from_millis(500)),
    );
    support::until_queued(&admin, &client, "k").await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter hung")
        .unwrap()
        .unwrap();
    println!(
        "the waiter had the lock {:?} after it started",
        started.elapsed()
    );
    assert!(got.is_held(), "lock() returned a lease that had run out");
    let value = support::lock_value(&admin, &name).await;
    assert_eq!(
        value.as_ref().and_then(|v| v.token()),
        Some(got.token()),
        "the lock is not the waiter's: {value:?}"
    );
    got.release().await.unwrap();
    proxy.set_subscriber_mode(None);
}

/// The release that hands the lock to a local waiter loses its reply with
/// its connection: Redis gave the lock to the waiter, fred sends the release
/// again, and the replay answers "already released". The waiter, still
/// waiting, gets the lock Redis gave it within a second, not after a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_whose_reply_is_lost_still_reaches_the_waiter() {
    use fred::interfaces::LuaInterface;
    use relaylock::__scripts::RELEASE;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let proxy = support::proxy::Proxy::start(server.port).await;
    let client = support::preset(&proxy.url())
        .default_lease(Duration::from_secs(10))
        .build()
        .await
        .expect("connect");
    let name = client.redis_key("k");
    // Loaded first, so the reply cut is the release's, not a NOSCRIPT.
    let _: String = admin.script_load(RELEASE).await.unwrap();
    for round in 0..3 {
        let held = client.lock("k").await.unwrap();
        let waiter = spawn_waiter(&client, LockOptions::default());
        support::until_queued(&admin, &client, "k").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.cut_instead_of_reply_to(fred::util::sha1_hash(RELEASE).as_bytes());
        held.release().await.expect("released, not lost");
        assert_eq!(proxy.cuts(), round + 1, "the release's reply was not cut");
        let got = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter still waits"))
            .unwrap()
            .unwrap();
        let value = support::lock_value(&admin, &name).await.expect("held");
        assert_eq!(value.token(), Some(got.token()), "round {round}");
        assert_eq!(value.fence(), Some(got.fencing_token()), "round {round}");
        got.release().await.unwrap();
        assert_freed(&admin, &name, Duration::from_secs(1), "released").await;
    }
}

/// The release that hands the lock to a local waiter is replayed by fred
/// (its connection dropped before the reply) while the waiter gives up:
/// whichever copy ran first gave the lock to the waiter, and the other
/// answers "already released". The lock must not stay with the waiter that
/// left for that waiter's whole lease: it is free within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_hand_over_to_a_waiter_that_left_leaves_the_lock_free() {
    use support::proxy::Proxy;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let proxy = Proxy::start(server.port).await;
    let client = support::client(&proxy.url()).await;
    let name = client.redis_key("k");
    for round in 0..3 {
        let held = client.lock("k").await.unwrap();
        let waiter = spawn_waiter(
            &client,
            LockOptions::default().wait(Duration::from_millis(500)),
        );
        support::until_queued(&admin, &client, "k").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        server.pause();
        let release = tokio::spawn(async move { held.release().await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The release is in the frozen server's socket; fred resends it on
        // a new connection.
        proxy.drop_connections();
        let timed_out = waiter.await.unwrap();
        // Unavailable when the deadline found the connection down (the
        // server is frozen, fred reconnecting): not taken either way.
        assert!(
            matches!(
                timed_out,
                Err(Error::Timeout { .. } | Error::Unavailable { .. })
            ),
            "{timed_out:?}"
        );
        server.resume();
        let _ = release.await.unwrap();
        assert_freed(
            &admin,
            &name,
            Duration::from_secs(3),
            &format!("round {round}: handed to a waiter that left"),
        )
        .await;
    }
}
