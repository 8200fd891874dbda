//! The lock's own API against a real redis-server: mutual exclusion across
//! tasks and processes with strictly increasing fencing tokens, `try_lock`
//! and a wait with a deadline, the polling wait strategy, a client built on
//! an existing fred client, and fencing tokens across a restart and in
//! `examples/fencing.rs`.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{Error, LockClient, LockOptions};
use support::{Admin, RedisServer};

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

/// `try_lock` never waits (`None` while the lock is held); a wait ends with
/// `Timeout` at its deadline, neither early nor long after; `wait(0)` is one
/// try; after the release the lock is free.
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
    assert!(support::taken(&fred, "app:4:{k}").await);
    g.release().await.unwrap();
    drop(lock);
    let pong: String = fred.ping(None).await.unwrap();
    assert_eq!(
        pong, "PONG",
        "relaylock must not quit a client it does not own"
    );
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

#[allow(dead_code)]
#[path = "../examples/fencing.rs"]
mod fencing;

/// `examples/fencing.rs` against a real server: the paused holder's late
/// write is rejected by the fenced store, and its guard knew it lost the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_example_rejects_the_paused_holder() {
    let server = RedisServer::start();
    let r = fencing::run(&server.url()).await.unwrap();
    println!("{r:?}");
    assert!(r.b_token > r.a_token);
    assert!(r.b_accepted, "{r:?}");
    assert!(!r.a_accepted, "the store accepted a stale write: {r:?}");
    assert!(r.a_knew, "{r:?}");
    assert_eq!(r.stored, "written by B");
}
