//! How waiters learn of a release, against a real redis-server: the lock's
//! channel is subscribed while a waiter waits and unsubscribed (after the
//! linger) once none is left, also after an UNSUBSCRIBE failed; a
//! subscription is confirmed without `CLIENT ID`; after the subscriber
//! connection is killed every channel is subscribed again in one round trip
//! and no release is lost; and the waiters of a key whose channel the ACL
//! denies poll, and never count that channel subscribed.

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

fn lease(d: Duration) -> LockOptions {
    LockOptions::default().lease(d)
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
            support::channels(&admin, "relaylock:4:{*").await.len() == 2
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
        support::channels(&admin, "relaylock:4:{*").await.is_empty()
    })
    .await;
    assert!(
        clean,
        "left subscribed: {:?}",
        support::channels(&admin, "relaylock:4:{*").await
    );
    assert_eq!(
        support::numsub(&admin, &format!("{}:ch", lock.redis_key("a"))).await,
        0
    );
    assert_only_records_and_queue_times_left(&admin, &lock).await;
}

/// What stays behind is the two locks' records (their fence counters and
/// rings; the locks themselves, free with nobody queued, are gone), each
/// with a TTL, and their queue-times records (scripts::QUEUE_TIMES), which
/// expire within the same retention (beside the client's own record,
/// `relaylock:4:client:<id>`, for operators).
async fn assert_only_records_and_queue_times_left(admin: &Client, lock: &LockClient) {
    let mut left = support::keys(admin, "relaylock:4:{*").await;
    left.sort();
    let times = |k: &str| format!("{}{}", lock.redis_key(k), relaylock::__scripts::QUEUE_TIMES);
    assert_eq!(
        left,
        vec![
            format!("{}:f", lock.redis_key("a")),
            times("a"),
            format!("{}:f", lock.redis_key("b")),
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
    for record in &left {
        let lock = record.strip_suffix(":f").unwrap();
        let value = support::lock_value(admin, lock).await;
        assert!(
            value.is_none(),
            "a free lock nobody waits for is deleted: {value:?}"
        );
        // The record lives a lease (the default, 30 s) plus the retention
        // after the last acquisition.
        let ttl: i64 = admin.pttl(record).await.unwrap();
        assert!(
            ttl > 0 && ttl <= 30_000 + relaylock::__scripts::SIDE_RETENTION_MS as i64,
            "record ttl {ttl}"
        );
    }
}

/// An UNSUBSCRIBE that fails while the connection stays up (here refused by
/// an ACL change, then allowed again) must not leave the channel subscribed
/// for good: the clean-up tries again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_unsubscribe_is_tried_again() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let acl = |rule: &'static str| {
        let admin = admin.clone();
        async move { support::acl_user(&admin, "unsub", &["~*", "&*", "+@all", rule]).await }
    };
    acl("+unsubscribe").await;
    let holder_client = client(&server).await;
    let lock = LockClient::builder()
        .url(format!("redis://unsub:pw@127.0.0.1:{}", server.port))
        .unsubscribe_linger(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let channel = format!("{}:ch", lock.redis_key("k"));
    let holder = holder_client.lock("k").await.unwrap();
    let mut waiter =
        Box::pin(lock.lock_with("k", LockOptions::default().wait(Duration::from_secs(5))));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut waiter)
            .await
            .is_err()
    );
    assert_eq!(support::numsub(&admin, &channel).await, 1);
    // The waiter leaves while UNSUBSCRIBE is refused.
    acl("-unsubscribe").await;
    drop(waiter);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        support::numsub(&admin, &channel).await,
        1,
        "the refusal did not happen"
    );
    acl("+unsubscribe").await;
    let gone = eventually(Duration::from_secs(3), || async {
        support::numsub(&admin, &channel).await == 0
    })
    .await;
    assert!(
        gone,
        "the channel stayed subscribed after its UNSUBSCRIBE failed"
    );
    holder.release().await.unwrap();
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
/// too, and must not count that one confirmed (a plain PING behind all the
/// SUBSCRIBEs gets PONG after the refusal has been dropped; a waiter that
/// took that for a confirmation would sleep until the holder's lease
/// instead of polling).
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

/// Keys whose channel the ACL denies, first waited for at the same moment:
/// the SUBSCRIBEs and their PINGs interleave on the subscriber connection,
/// and no denied channel may count as subscribed, or its waiter sleeps on
/// the holder's lease instead of polling: every waiter takes its key once
/// it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_denied_channel_counts_as_subscribed_when_keys_subscribe_at_once() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = client(&server).await;
    let limited = support::channel_denied_client(&admin, &server).await;
    let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
    let mut holders = Vec::new();
    for key in &keys {
        holders.push(
            holder_client
                .lock_with(key, lease(Duration::from_secs(30)))
                .await
                .unwrap(),
        );
    }
    let waiters: Vec<_> = keys
        .iter()
        .map(|key| {
            let (limited, key) = (limited.clone(), key.clone());
            tokio::spawn(async move { limited.lock(&key).await.map(drop) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for holder in holders {
        holder.release().await.unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    let mut stranded = 0;
    for waiter in waiters {
        match tokio::time::timeout_at(deadline, waiter).await {
            Ok(taken) => taken.unwrap().unwrap(),
            Err(_) => stranded += 1,
        }
    }
    assert_eq!(stranded, 0, "{stranded} of {} waiters stranded", keys.len());
}

/// A degraded key (the ACL forbids its channel): the waiter holding the
/// polling role leaves, and the waiter it hands the role to times out in
/// the same tick. The role must not be lost with it: a waiter without a
/// deadline takes the lock once it is free, in every round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_keys_polling_role_survives_a_waiter_timing_out() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let holder_client = client(&server).await;
    let limited = support::channel_denied_client(&admin, &server).await;
    let mut stranded = 0;
    let rounds = 4;
    for round in 0..rounds {
        let key = format!("k{round}");
        let holder = holder_client
            .lock_with(&key, LockOptions::default().lease(Duration::from_secs(30)))
            .await
            .unwrap();
        // K+1 waiters with the same deadline, spawned together.
        let mut timed = Vec::new();
        for _ in 0..6 {
            let limited = limited.clone();
            let key = key.clone();
            timed.push(tokio::spawn(async move {
                limited
                    .lock_with(
                        &key,
                        LockOptions::default().wait(Duration::from_millis(1500)),
                    )
                    .await
                    .map(|g| g.fencing_token())
            }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let patient = {
            let limited = limited.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let g = limited.lock(&key).await.unwrap();
                let at = Instant::now();
                drop(g);
                at
            })
        };
        for t in timed {
            assert!(t.await.unwrap().is_err());
        }
        // Everybody with a deadline is gone; now free the lock.
        tokio::time::sleep(Duration::from_millis(200)).await;
        holder.release().await.unwrap();
        let released = Instant::now();
        match tokio::time::timeout(Duration::from_secs(5), patient).await {
            Ok(at) => {
                let took = at.unwrap().duration_since(released);
                println!(
                    "round {round}: the patient waiter took the lock {took:?} after the release"
                );
            }
            Err(_) => {
                stranded += 1;
                println!("round {round}: the patient waiter did NOT take the free lock within 5 s (stranded)");
            }
        }
        let _: i64 = admin.del(holder_client.redis_key(&key)).await.unwrap();
    }
    assert_eq!(
        stranded, 0,
        "{stranded} of {rounds} rounds stranded a waiter"
    );
}
