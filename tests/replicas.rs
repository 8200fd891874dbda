//! `min_replicas`, against real primaries and replicas: an acquisition is
//! confirmed once a replica acknowledged it (`WAIT`), for locks, permits and
//! read-write holds; without enough acknowledgements it fails with
//! `NotReplicated` and is released, and a `WAIT` that reached another server
//! never counts. The confirming write matches the exact hold and never
//! shortens its lease; calls queue for the replica connections; a client
//! dropped while its pool of them opens leaves no connection.
//!
//! Its own test binary: it installs a process-wide metrics recorder
//! ([`relaylock_testkit::counters`]).

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use relaylock::{metrics as names, Error, LockClient, LockOptions};
use support::counters::{counter, named};
use support::{command_calls, delta, eventually, Admin, RedisServer};

/// A client whose watchdog locks have `lease` (renewed every `lease / 3`).
async fn client(server: &RedisServer, lease: Duration) -> LockClient {
    support::counters::watched_client(&server.url(), lease).await
}

/// The call failed with `NotReplicated { acked, required }`.
fn not_replicated(r: &relaylock::Result<relaylock::LockGuard>, acked: u32, required: u32) {
    match r {
        Err(Error::NotReplicated {
            acked: a,
            required: q,
        }) if (*a, *q) == (acked, required) => {}
        other => panic!(
            "expected NotReplicated {{ acked: {acked}, required: {required} }}, got {other:?}"
        ),
    }
}

/// `min_replicas`: acknowledged with one replica up; with it stopped, the
/// lock is released and the call fails with `NotReplicated`. A WAIT never
/// blocks the connection other locks use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_waits_for_a_real_replica() {
    let primary = RedisServer::start();
    let mut replica = RedisServer::start_replica_of(&primary);
    let admin = primary.admin().await;
    let replica_admin = replica.admin().await;
    let lock = client(&primary, Duration::from_secs(30)).await;
    let one = |ms| named("replicas").min_replicas(1, Duration::from_millis(ms));

    let g = lock.lock_with("acked", one(2000)).await.unwrap();
    let on_replica = support::lock_value(&replica_admin, &lock.redis_key("acked"))
        .await
        .map(|v| v.head);
    assert_eq!(
        on_replica,
        Some(format!("{}:{}", g.token(), g.fencing_token())),
        "acknowledged, so the replica has the lock"
    );
    g.release().await.unwrap();

    // Two asked for, one exists.
    let r = lock
        .lock_with(
            "two",
            named("replicas").min_replicas(2, Duration::from_millis(100)),
        )
        .await;
    not_replicated(&r, 1, 2);
    assert!(!support::taken(&admin, &lock.redis_key("two")).await);

    // The replica stops: error, and the lock is released.
    replica.kill();
    let start = Instant::now();
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock_with("lonely", one(600)).await })
    };
    // Meanwhile the command connection is not blocked by that WAIT.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let plain = Instant::now();
    lock.lock("other").await.unwrap().release().await.unwrap();
    let plain = plain.elapsed();
    let r = waiting.await.unwrap();
    let took = start.elapsed();
    not_replicated(&r, 0, 1);
    assert!(
        took >= Duration::from_millis(600),
        "WAIT returned early: {took:?}"
    );
    assert!(
        plain < Duration::from_millis(400),
        "a plain lock waited {plain:?} behind a WAIT"
    );
    assert!(!support::taken(&admin, &lock.redis_key("lonely")).await);
    let g = lock
        .try_lock_with("lonely", LockOptions::default())
        .await
        .unwrap()
        .expect("released after the failed WAIT");
    g.release().await.unwrap();
    // Only the one acknowledged lock counts as released under this name:
    // the releases of unreplicated and abandoned acquisitions record nothing.
    assert_eq!(counter(names::RELEASED_TOTAL, &[("name", "replicas")]), 1);

    assert_a_call_dropped_during_wait_leaves_no_lock(&lock, &admin, one(2000)).await;
    assert_bad_replica_settings_are_typed_errors(&lock).await;
}

/// A call (with `opts`, a 30 s lease) dropped while it waits for replicas
/// leaves no lock behind: the key goes long before the lease would end.
async fn assert_a_call_dropped_during_wait_leaves_no_lock(
    lock: &LockClient,
    admin: &Client,
    opts: LockOptions,
) {
    let abandoned = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock_with("abandoned", opts).await })
    };
    let key = lock.redis_key("abandoned");
    assert!(
        eventually(Duration::from_secs(2), || async {
            support::taken(admin, &key).await
        })
        .await,
        "the acquisition never happened"
    );
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(2), || async {
            !support::taken(admin, &key).await
        })
        .await,
        "a call dropped during WAIT left its lock held"
    );
}

/// Bad `min_replicas` settings are typed errors, before anything is sent.
async fn assert_bad_replica_settings_are_typed_errors(lock: &LockClient) {
    for bad in [
        LockOptions::default().min_replicas(0, Duration::from_secs(1)),
        LockOptions::default().min_replicas(1, Duration::ZERO),
        // WAIT longer than half the lease: the lock could expire meanwhile.
        LockOptions::default()
            .lease(Duration::from_secs(1))
            .min_replicas(1, Duration::from_millis(600)),
    ] {
        assert!(matches!(
            lock.lock_with("bad", bad).await,
            Err(Error::InvalidArgument(_))
        ));
    }
}

/// More concurrent `min_replicas` calls than replica connections: they queue
/// for a connection (WAIT blocks the one it runs on) instead of timing out
/// behind another call's WAIT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_calls_queue_for_a_connection() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let lock = LockClient::builder()
        .url(primary.url())
        .replica_connections(1)
        .command_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    replica.pause();
    let opts = || LockOptions::default().min_replicas(1, Duration::from_millis(1500));
    let start = Instant::now();
    let (a, b) = tokio::join!(lock.lock_with("a", opts()), lock.lock_with("b", opts()));
    let took = start.elapsed();
    replica.resume();
    for r in [&a, &b] {
        not_replicated(r, 0, 1);
    }
    // One after the other on the single connection.
    assert!(took >= Duration::from_millis(3000), "{took:?}");
}

/// `min_replicas` for a semaphore's permits and a read-write lock's read and
/// write holds, against a real replica: acknowledged while it runs; frozen,
/// each fails with `NotReplicated` and leaves its permits free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_covers_permits_and_read_write_holds() {
    let primary = RedisServer::try_start(&["--repl-diskless-sync-delay", "0"]).unwrap();
    let replica = RedisServer::start_replica_of(&primary);
    let admin = primary.admin().await;
    support::until_a_replica_acknowledges(&admin).await;
    let lock = client(&primary, Duration::from_secs(30)).await;
    let wait = |ms| Duration::from_millis(ms);
    let sem = lock.semaphore("pool", 3).unwrap();
    let sem_opts = |ms| {
        relaylock::SemaphoreOptions::default()
            .permits(2)
            .min_replicas(1, wait(ms))
    };
    let rw = lock.rw_lock("doc");
    let rw_opts = |ms| LockOptions::default().min_replicas(1, wait(ms));

    sem.acquire_with(sem_opts(2000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    rw.read_with(rw_opts(2000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    rw.write_with(rw_opts(2000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    replica.pause();
    let refused = |r: &relaylock::Error| {
        matches!(
            r,
            Error::NotReplicated {
                acked: 0,
                required: 1
            }
        )
    };
    let e = sem.acquire_with(sem_opts(300)).await.unwrap_err();
    assert!(refused(&e), "{e:?}");
    let e = rw.read_with(rw_opts(300)).await.unwrap_err();
    assert!(refused(&e), "{e:?}");
    let e = rw.write_with(rw_opts(300)).await.unwrap_err();
    assert!(refused(&e), "{e:?}");
    replica.resume();
    // Nothing was left held: all 3 permits, and the write lock, are free.
    let all = sem
        .acquire_with(
            relaylock::SemaphoreOptions::default()
                .permits(3)
                .wait(wait(1000)),
        )
        .await
        .unwrap();
    all.release().await.unwrap();
    rw.write_with(LockOptions::default().wait(wait(1000)))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// `RENEW`'s mode `'2'`, the write a `min_replicas` check waits for: it
/// renews only the exact head `<token>:<fence>` (an acquisition fred
/// replayed on another server has the same token with another fence there),
/// never shortens the lease (a delayed copy cannot undo a later `extend`),
/// and always writes (one `PEXPIRE`, also when the lease stays). Modes `'0'`
/// (exact) and `'1'` (grow-only) are unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_check_write_matches_the_head_and_never_shortens() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server, Duration::from_secs(30)).await;
    let g = lock
        .lock_with("k", LockOptions::default().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let key = lock.redis_key("k");
    let renew = |mode: &'static str, token: String, lease: u64| {
        let (admin, key) = (admin.clone(), key.clone());
        async move {
            admin
                .eval::<Vec<i64>, _, _, _>(
                    relaylock::__scripts::RENEW,
                    vec![key],
                    vec![
                        mode.to_owned(),
                        relaylock::__scripts::SIDE_RETENTION_MS.to_string(),
                        token,
                        lease.to_string(),
                    ],
                )
                .await
                .unwrap()
        }
    };
    let pttl = || {
        let (admin, key) = (admin.clone(), key.clone());
        async move { admin.pttl::<i64, _>(key).await.unwrap() }
    };
    let head = format!("{}:{}", g.token(), g.fencing_token());
    // As a `min_replicas` acquisition writes it (the fast path's value is
    // the token alone, and a `min_replicas` call takes no fast path).
    let _: () = admin
        .custom(
            fred::types::CustomCommand::new_static("SET", None, false),
            vec![key.clone(), format!("{head}||"), "KEEPTTL".into()],
        )
        .await
        .unwrap();

    let before = command_calls(&admin).await;
    assert_eq!(renew("2", head.clone(), 5_000).await, [1]);
    let after = command_calls(&admin).await;
    // The lock's and its record's.
    assert_eq!(delta(&before, &after, "pexpire"), 2, "it always writes");
    assert!(pttl().await > 25_000, "never shorter: {}", pttl().await);
    assert_eq!(renew("2", head.clone(), 60_000).await, [1]);
    assert!(
        pttl().await > 55_000,
        "at least the lease: {}",
        pttl().await
    );

    let other_fence = format!("{}:{}", g.token(), g.fencing_token() + 1);
    assert_eq!(renew("2", other_fence, 60_000).await, [-1], "another fence");
    assert_eq!(
        renew("2", g.token().to_owned(), 60_000).await,
        [-1],
        "the token alone"
    );

    assert_eq!(renew("1", g.token().to_owned(), 5_000).await, [1]);
    assert!(pttl().await > 50_000, "grow-only");
    assert_eq!(renew("0", g.token().to_owned(), 5_000).await, [1]);
    assert!(pttl().await <= 5_000, "exact");
    g.release().await.unwrap();
    assert_eq!(renew("2", head, 5_000).await, [0], "released");
}

/// `min_replicas` across a failover, as one pool connection sees it: the
/// lock is taken and renewed on the first primary, whose one replica is
/// frozen (it acknowledges nothing); right after the renewal's reply, that
/// connection is closed and fred reconnects it to a second primary, whose
/// replica is healthy (the proxy redirects new connections there). A `WAIT`
/// sent there counts that replica although it never saw the lock: the call
/// must fail with `NotReplicated` (0 acknowledged; or with fred's error when
/// it could not route the `WAIT` while reconnecting) and release the lock on
/// the first primary: the connection watch sees that the `WAIT` ran on
/// another connection than the renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_does_not_count_a_wait_on_another_server() {
    // Replicas online at once, not after the default 5 s diskless delay.
    let quick = ["--repl-diskless-sync-delay", "0"];
    let first = RedisServer::try_start(&quick).unwrap();
    let frozen = RedisServer::start_replica_of(&first);
    let second = RedisServer::try_start(&quick).unwrap();
    let _healthy = RedisServer::start_replica_of(&second);
    let (first_admin, second_admin) = (first.admin().await, second.admin().await);
    // Both replicas are online and acknowledging before one is frozen.
    for admin in [&first_admin, &second_admin] {
        support::until_a_replica_acknowledges(admin).await;
    }
    frozen.pause();

    let proxy = support::proxy::Proxy::start(first.port).await;
    counter("", &[]);
    let lock = support::preset(&proxy.url())
        .default_lease(Duration::from_secs(30))
        .build()
        .await
        .expect("connect");
    // The renewal before WAIT is the first RENEW a connection sends (no
    // watchdog runs: the lease is fixed).
    let renew = fred::util::sha1_hash(relaylock::__scripts::RENEW);
    proxy.cut_after_reply_to(renew.as_bytes(), second.port);
    let opts = named("elsewhere")
        .lease(Duration::from_secs(30))
        .min_replicas(1, Duration::from_millis(500));
    let r = lock.lock_with("k", opts).await;
    assert_eq!(proxy.cuts(), 1, "the renewal's connection was not cut");
    // Either the watch saw the new connection, or fred could not route the
    // WAIT at all while it reconnected; never a guard.
    match &r {
        Err(Error::Redis(_)) => {}
        _ => not_replicated(&r, 0, 1),
    }
    let key = lock.redis_key("k");
    assert!(
        eventually(Duration::from_secs(2), || async {
            !support::taken(&first_admin, &key).await
        })
        .await,
        "the unconfirmed lock is still held on the first primary"
    );
    assert!(!support::taken(&second_admin, &key).await);
    frozen.resume();
}

/// The connections of a client opened through the proxy, as the server sees
/// them (every client but the admin's own connection).
async fn client_connections(admin: &Client) -> usize {
    let list: String = admin
        .custom(
            CustomCommand::new_static("CLIENT", None, false),
            vec!["LIST"],
        )
        .await
        .unwrap();
    list.lines().count().saturating_sub(1)
}

/// The last clone of a client is dropped while the pool of connections for
/// `min_replicas` is still connecting (slowed by the proxy): the pool, once
/// open, must be closed, not left connected and reconnecting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dropped_while_its_replica_pool_opens_leaves_no_connection() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let proxy = support::proxy::Proxy::start(server.port).await;
    let lock = LockClient::builder()
        .url(proxy.url())
        .replica_connections(4)
        .build()
        .await
        .unwrap();
    // Every chunk is delayed, both ways: the acquisition takes about 0.6 s
    // and the pool's connect longer, so the call below is dropped while the
    // pool connects.
    proxy.set_mode(support::proxy::Mode::Delay(Duration::from_millis(300)));
    let opts = LockOptions::default().min_replicas(1, Duration::from_millis(100));
    let r = tokio::time::timeout(Duration::from_millis(1000), lock.lock_with("k", opts)).await;
    assert!(
        r.is_err(),
        "the call finished before it could be dropped: {r:?}"
    );
    drop(lock);
    proxy.set_mode(support::proxy::Mode::Pass);
    let closed = eventually(Duration::from_secs(10), || async {
        client_connections(&admin).await == 0
    })
    .await;
    assert!(
        closed,
        "{} connections of a dropped client stayed open",
        client_connections(&admin).await
    );
}
