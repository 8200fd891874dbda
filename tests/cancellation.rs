//! Lock calls cancelled at any point leave nothing held and nothing queued:
//! dropped before their first poll, in flight, or after a release woke
//! them; and an abandoned acquisition never takes the lock later.
//!
//! The stress runs ([`relaylock_testkit::stress`]): 3 clients x 8 tasks on
//! one key drop lock calls and releases at random points, plainly, while the
//! pub/sub connections are killed, and while the script cache is flushed.
//! An independent ledger and an observer of the lock's value judge safety
//! (one holder at a time, no stale token), liveness (no waiter asleep while
//! the key is free) and clean-up (no token, queue entry, key or channel left
//! behind). Each run prints its seed; `RELAYLOCK_STRESS_SEED` replays it.

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{LockClient, LockOptions};
use support::stress::{stress, Faults};
use support::{command_calls, delta, eventually, Admin, RedisServer};

async fn client(server: &RedisServer) -> LockClient {
    support::client(&server.url()).await
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

/// An acquisition abandoned in flight is released with an unknown fence; if
/// it had not taken the lock, a delayed copy of it must never take it later:
/// not when the key was absent, and not after the lock it found held changed
/// hands (the value carries the `void` field through every transition).
#[tokio::test]
async fn abandoned_acquisition_can_never_succeed_later() {
    use relaylock::__scripts::SIDE_RETENTION_MS;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let acquire = |key: &'static str, token: &'static str, lease: u64| {
        acquire_as(admin.clone(), key, token, lease)
    };
    let release = |key: &'static str, token: &'static str, fence: String| {
        release_as(admin.clone(), key, token, fence)
    };

    // The orphan release arrives first and finds nothing.
    let key = "p:2:{k}";
    assert_eq!(release(key, "tok", String::new()).await, 0);
    let ttl: i64 = admin
        .pttl(format!("p:2:{{k}}:void:{}", shaped("tok")))
        .await
        .unwrap();
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
    // still holds (the `void` field lives past the value it was written
    // in).
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

/// A token of relaylock's shape (`<16 hex>-<16 hex>`) named by `name` (up
/// to 8 bytes): the scripts take a value of one field for a fast-path hold
/// only if it has that shape.
fn shaped(name: &str) -> String {
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("0123456789abcdef-{hex:0>16}")
}

/// The names ACQUIRE and RELEASE of `token` take for the lock `key`.
fn token_keys(key: &str, token: &str) -> Vec<String> {
    let token = &shaped(token);
    vec![
        key.to_string(),
        format!("{key}:void:{token}"),
        format!("{key}:void"),
    ]
}

/// ACQUIRE of `token` with a lease in ms; its reply: the fence when taken,
/// `-1` when refused for the token's void marker.
async fn acquire_as(admin: Client, key: &str, token: &str, lease: u64) -> Vec<i64> {
    let args = vec![
        shaped(token),
        lease.to_string(),
        String::new(),
        format!("{key}:ch"),
        "PUBLISH".into(),
    ];
    admin
        .eval::<Vec<i64>, _, _, _>(relaylock::__scripts::ACQUIRE, token_keys(key, token), args)
        .await
        .unwrap()
}

/// RELEASE of `token` with a fence ("" when abandoned).
async fn release_as(admin: Client, key: &str, token: &str, fence: String) -> i64 {
    use relaylock::__scripts::{HANDOFF_GRACE_MS, SIDE_RETENTION_MS};
    let args: Vec<String> = vec![
        shaped(token),
        fence,
        format!("{key}:ch"),
        SIDE_RETENTION_MS.to_string(),
        "me".into(),
        HANDOFF_GRACE_MS.to_string(),
        "PUBLISH".into(),
        "0".into(),
    ];
    admin
        .eval::<i64, _, _, _>(relaylock::__scripts::RELEASE, token_keys(key, token), args)
        .await
        .unwrap()
}

/// Lock calls and releases cancelled at random points, on one key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_and_release_calls_stay_safe_and_leave_nothing() {
    stress("plain", 0, Faults::default()).await;
}

/// The same while the pub/sub connections are killed every 700 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_with_pubsub_kills_stays_safe_and_leaves_nothing() {
    let faults = Faults {
        kill_pubsub: true,
        ..Faults::default()
    };
    stress("pubsub-kill", 0x5eed_0fc1_1e47_7100, faults).await;
}

/// The same while the lock server's script cache is flushed every 10-40 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_with_script_cache_flushes_stays_safe_and_leaves_nothing() {
    let faults = Faults {
        flush_scripts: true,
        ..Faults::default()
    };
    stress("script-flush", 0xf105_4000_0000_0000, faults).await;
}
