//! `relaylock unlock` and `status --held` against a real redis-server: a
//! stuck hold is released through the release script (the fencing token
//! keeps growing, the waiters are woken at once, the holder finds its hold
//! lost), a wrong token and a missing one change nothing, and `--force`
//! releases every hold of a semaphore or read-write lock.

use std::time::{Duration, Instant};

use relaylock::inspect::Primitive;
use relaylock::{LockClient, LockOptions, SemaphoreOptions};
use relaylock_testkit::RedisServer;
use serde_json::Value as Json;

mod common;

/// `relaylock <args> --url <url>`: exit status, stdout, stderr.
async fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let mut all = args.to_vec();
    all.extend_from_slice(&["--url", url]);
    common::relaylock(&all).await
}

/// The tokens holding `key`'s `primitive`.
async fn holders(client: &LockClient, key: &str, primitive: Primitive) -> Vec<String> {
    let found = client.inspect(key).await.unwrap();
    found
        .states
        .iter()
        .filter(|s| s.primitive == primitive)
        .flat_map(|s| s.holders.iter().map(|h| h.token.clone()))
        .collect()
}

/// A lock on `key` whose holder stopped: taken by `client` with `lease` and
/// no watchdog, its guard forgotten (never released). Its token and
/// fencing token.
async fn stuck_lock(client: &LockClient, key: &str, lease: Duration) -> (String, u64) {
    let stuck = LockOptions::default().lease(lease).watchdog(false);
    let guard = client.lock_with(key, stuck).await.unwrap();
    let held = (guard.token().to_owned(), guard.fencing_token());
    std::mem::forget(guard);
    held
}

/// Waits (at most 5 s) until a client is queued on `key`'s first primitive.
async fn wait_queued(client: &LockClient, key: &str) {
    let started = Instant::now();
    while client.inspect(key).await.unwrap().states[0]
        .queue
        .is_empty()
    {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{key}: never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A lock whose holder stopped (its guard forgotten, no watchdog, a 60 s
/// lease) with another client waiting: a wrong token and no token change
/// nothing; the right one releases it, the waiter gets it at once, with a
/// greater fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_lock_is_released_by_its_token_and_the_waiter_wakes_with_a_greater_fence() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let (token, fence) = stuck_lock(&a, "job", Duration::from_secs(60)).await;
    let waiter = tokio::spawn(async move {
        let g = b
            .lock_with("job", LockOptions::default().wait(Duration::from_secs(30)))
            .await
            .unwrap();
        (Instant::now(), g.fencing_token(), g.release().await)
    });
    // The waiter is queued before the operator steps in.
    wait_queued(&a, "job").await;

    let (code, out, err) = cli(&url, &["unlock", "job", "--token", "not-a-token"]).await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("token not-a-token holds nothing"), "{out}");
    let (code, _, err) = cli(&url, &["unlock", "job"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--token"), "{err}");
    assert_eq!(
        holders(&a, "job", Primitive::Mutex).await,
        vec![token.clone()]
    );

    let unlocked = Instant::now();
    let (code, out, err) = cli(&url, &["unlock", "job", "--token", &token]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "released mutex job: token {token}, fencing token {fence}"
        )),
        "{out}"
    );
    let (woke, next_fence, released) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    released.unwrap();
    // Woken by the release's message, not by the 60 s lease running out.
    assert!(
        woke.duration_since(unlocked) < Duration::from_secs(5),
        "{:?}",
        woke.duration_since(unlocked)
    );
    assert!(next_fence > fence, "{next_fence} after {fence}");
    // Nothing left to release: the same token again changes nothing.
    let (code, out, _) = cli(&url, &["unlock", "job", "--token", &token]).await;
    assert_eq!(code, 1, "{out}");
    a.shutdown().await.unwrap();
}

/// A holder that still runs finds its lock lost at once (issue 36): the
/// unlock tells its client on the client's control channel, and its
/// `lost()` fires within a few round trips, not at its next renewal (a
/// third of its 60 s lease: 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_holder_of_a_released_lock_finds_it_lost() {
    let server = RedisServer::start();
    let url = server.url();
    let a = LockClient::builder()
        .url(&url)
        .default_lease(Duration::from_secs(60))
        .build()
        .await
        .unwrap();
    let guard = a.lock("report").await.unwrap();
    let (code, out, err) = cli(&url, &["unlock", "report", "--token", guard.token()]).await;
    assert_eq!(code, 0, "{out}{err}");
    let unlocked = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the holder did not learn at once that its lock was released");
    let heard = unlocked.elapsed();
    println!("the holder's lost() fired {heard:?} after `relaylock unlock` returned");
    assert!(heard < Duration::from_secs(1), "{heard:?}");
    assert!(!guard.is_held());
    // The library's unlock does the same, for a semaphore permit too.
    let p = a.semaphore("jobs", 2).unwrap().acquire().await.unwrap();
    let unlocked = Instant::now();
    a.unlock(Primitive::Semaphore, "jobs", p.token())
        .await
        .unwrap()
        .expect("held");
    tokio::time::timeout(Duration::from_secs(5), p.lost())
        .await
        .expect("the permit's holder did not learn at once");
    println!(
        "a permit's lost() fired {:?} after unlock()",
        unlocked.elapsed()
    );
    a.shutdown().await.unwrap();
}

/// `--force` releases every hold of the kind asked for: a semaphore's two
/// holds, then a read-write lock's write; the permits and the lock are
/// free afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_releases_every_hold_of_a_semaphore_and_a_write() {
    let server = RedisServer::start();
    let url = server.url();
    let a = LockClient::connect(&url).await.unwrap();
    let sem = a.semaphore("pool", 3).unwrap();
    let stuck = SemaphoreOptions::default()
        .lease(Duration::from_secs(60))
        .watchdog(false);
    std::mem::forget(sem.acquire_with(stuck.clone()).await.unwrap());
    std::mem::forget(sem.acquire_with(stuck.permits(2)).await.unwrap());
    assert_eq!(sem.available().await.unwrap(), 0);
    let rw = a.rw_lock("pool");
    let write = rw
        .write_with(
            LockOptions::default()
                .lease(Duration::from_secs(60))
                .watchdog(false),
        )
        .await
        .unwrap();
    let write_token = write.token().to_owned();
    std::mem::forget(write);

    let (code, out, err) = cli(&url, &["unlock", "pool", "--force", "--kind", "semaphore"]).await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.matches("released semaphore pool").count(), 2, "{out}");
    assert_eq!(sem.available().await.unwrap(), 3);
    // The read-write lock of the same name was left alone.
    assert_eq!(
        holders(&a, "pool", Primitive::RwLock).await,
        vec![write_token.clone()]
    );

    let (code, out, err) = cli(
        &url,
        &[
            "unlock",
            "pool",
            "--token",
            &write_token,
            "--kind",
            "rwlock",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("released rwlock pool"), "{out}");
    let read = rw
        .try_read()
        .await
        .unwrap()
        .expect("the write was released");
    read.release().await.unwrap();
    let (code, out, _) = cli(&url, &["unlock", "pool", "--force"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("nothing is held"), "{out}");
    a.shutdown().await.unwrap();
}

/// `status --held` lists what is held, not the tombstones of released
/// locks; without it both show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_held_lists_only_what_is_held() {
    let server = RedisServer::start();
    let url = server.url();
    let a = LockClient::connect(&url).await.unwrap();
    let held = a.lock("busy").await.unwrap();
    a.lock("idle").await.unwrap().release().await.unwrap();
    let keys = |doc: &Json| -> Vec<String> {
        doc["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["key"].as_str().unwrap().to_owned())
            .collect()
    };
    let (code, out, err) = cli(&url, &["status", "--json"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        keys(&serde_json::from_str(out.trim()).unwrap()),
        ["busy", "idle"]
    );
    let (code, out, err) = cli(&url, &["status", "--json", "--held"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(keys(&serde_json::from_str(out.trim()).unwrap()), ["busy"]);
    held.release().await.unwrap();
    let (code, out, err) = cli(&url, &["status", "--held"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nothing held under relaylock:"), "{out}");
    a.shutdown().await.unwrap();
}

/// `LockClient::unlock` from a client whose own waiter is queued on the key:
/// that waiter is woken at once, for a lock and for a semaphore (the
/// release scripts must not take the unlocking client for the releasing
/// holder, whose queue entry they drop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlocking_from_a_client_with_a_waiter_of_its_own_wakes_that_waiter() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, b) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let (token, _) = stuck_lock(&a, "k", Duration::from_secs(20)).await;
    let sem = a.semaphore("s", 1).unwrap();
    let permit = sem
        .acquire_with(
            SemaphoreOptions::default()
                .lease(Duration::from_secs(20))
                .watchdog(false),
        )
        .await
        .unwrap();
    let permit_token = permit.token().to_owned();
    std::mem::forget(permit);

    let waiter = {
        let b = b.clone();
        tokio::spawn(async move {
            let wait = LockOptions::default().wait(Duration::from_secs(30));
            b.lock_with("k", wait)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            Instant::now()
        })
    };
    let sem_waiter = {
        let sem = b.semaphore("s", 1).unwrap();
        tokio::spawn(async move {
            let wait = SemaphoreOptions::default().wait(Duration::from_secs(30));
            sem.acquire_with(wait)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            Instant::now()
        })
    };
    for (key, primitive) in [("k", Primitive::Mutex), ("s", Primitive::Semaphore)] {
        wait_queued(&b, key).await;
        let t = if key == "k" { &token } else { &permit_token };
        assert!(b.unlock(primitive, key, t).await.unwrap().is_some());
    }
    let unlocked = Instant::now();
    for w in [waiter, sem_waiter] {
        let woke = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("the unlocking client's own waiter was not woken")
            .unwrap();
        assert!(
            woke.saturating_duration_since(unlocked) < Duration::from_secs(3),
            "woken {:?} after the unlock, not by it",
            woke.saturating_duration_since(unlocked)
        );
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A holder that still runs and releases after an operator's unlock (and
/// after another client took the lock) gets `LockLost`, not `Ok`: the
/// unlock does not record its fence as released. The same for a permit and
/// for `with_lock`, whose closure ran while another client held the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_released_by_an_operator_gets_lock_lost_from_its_own_release() {
    let server = RedisServer::start();
    let url = server.url();
    let (a, ops, other) = (
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
        LockClient::connect(&url).await.unwrap(),
    );
    let long = LockOptions::default().lease(Duration::from_secs(30));
    let guard = a.lock_with("k", long.clone().watchdog(true)).await.unwrap();
    assert!(ops
        .unlock(Primitive::Mutex, "k", guard.token())
        .await
        .unwrap()
        .is_some());
    let next = other
        .try_lock("k")
        .await
        .unwrap()
        .expect("free after the unlock");
    assert!(matches!(
        guard.release().await,
        Err(relaylock::Error::LockLost { .. })
    ));
    next.release().await.unwrap();

    let sem = a.semaphore("s", 1).unwrap();
    let permit = sem.acquire().await.unwrap();
    assert!(ops
        .unlock(Primitive::Semaphore, "s", permit.token())
        .await
        .unwrap()
        .is_some());
    assert!(matches!(
        permit.release().await,
        Err(relaylock::Error::LockLost { .. })
    ));

    let result = a
        .with_lock("w", long, async |g| {
            let freed = ops.unlock(Primitive::Mutex, "w", g.token()).await.unwrap();
            assert!(freed.is_some());
            other
                .try_lock("w")
                .await
                .unwrap()
                .expect("free")
                .release()
                .await
                .unwrap();
            42
        })
        .await;
    assert!(
        matches!(result, Err(relaylock::Error::LockLost { .. })),
        "{result:?}"
    );
    for c in [a, ops, other] {
        c.shutdown().await.unwrap();
    }
}
