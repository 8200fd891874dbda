//! The harness of the lock's fault scenarios (tests/faults.rs): clients as
//! the scenarios use them, critical sections that write to the [`Ledger`],
//! contending workers that retry errors as a caller would, a fault injected
//! on a period, a proxy in front of a server, and the checks that close
//! every scenario (safety by the ledger, nothing left behind).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{Error, LockClient, LockGuard, LockOptions, MultiGuard};

use crate::ledger::{Ledger, Totals};
use crate::proxy::Proxy;
use crate::{channels, eventually, keys, Admin, RedisServer};

/// The lease [`crate::fault_preset`] sets.
pub const LEASE: Duration = Duration::from_secs(1);
/// The bookkeeping retention [`crate::fault_preset`] sets.
pub const RETENTION: Duration = Duration::from_secs(1);

/// A client as the scenarios use it ([`crate::fault_preset`]): a 1 s lease
/// renewed by the watchdog, bookkeeping kept 1 s, 1 s command timeout.
pub async fn lock_client(url: &str, prefix: &str) -> LockClient {
    crate::fault_preset(url)
        .prefix(prefix)
        .build()
        .await
        .expect("connect")
}

/// Inside a critical section. Leaving takes the writer out of the ledger:
/// awaited at the end of the section, and in the background when the
/// section's future is dropped because the lock was lost.
struct Inside {
    ledger: Arc<Ledger>,
    key: String,
    writer: String,
}

impl Inside {
    async fn leave(mut self) {
        let (key, writer) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.writer),
        );
        self.ledger.leave(&key, &writer).await;
    }
}

impl Drop for Inside {
    fn drop(&mut self) {
        if self.writer.is_empty() {
            return;
        }
        let (ledger, key, writer) = (
            Arc::clone(&self.ledger),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.writer),
        );
        tokio::spawn(async move { ledger.leave(&key, &writer).await });
    }
}

/// One critical section: enter and write the fencing token, hold, write
/// again (a second write that a stale holder would get rejected), leave.
pub async fn critical(ledger: &Arc<Ledger>, key: &str, g: &LockGuard, hold: Duration) {
    let inside = Inside {
        ledger: Arc::clone(ledger),
        key: key.to_owned(),
        writer: g.token().to_owned(),
    };
    ledger.write(key, g.fencing_token(), g.token(), true).await;
    tokio::time::sleep(hold).await;
    ledger.write(key, g.fencing_token(), g.token(), false).await;
    inside.leave().await;
}

#[derive(Default)]
pub struct Stats {
    pub acquired: AtomicU64,
    pub lost: AtomicU64,
    pub errors: AtomicU64,
    pub max_wait_us: AtomicU64,
}

impl Stats {
    pub fn line(&self) -> String {
        format!(
            "acquired {}, lost while held {}, errors retried {}, longest wait {:?}",
            self.acquired.load(Ordering::SeqCst),
            self.lost.load(Ordering::SeqCst),
            self.errors.load(Ordering::SeqCst),
            Duration::from_micros(self.max_wait_us.load(Ordering::SeqCst))
        )
    }
}

/// Lock, run a critical section, repeat until `until`; a call that fails is
/// retried (a waiter without a deadline must eventually acquire).
async fn worker(
    lock: LockClient,
    ledger: Arc<Ledger>,
    keys: Arc<Vec<String>>,
    first: usize,
    until: Instant,
    hold: Duration,
    stats: Arc<Stats>,
) {
    let mut i = first;
    while Instant::now() < until {
        let key = &keys[i % keys.len()];
        i += 1;
        round(&lock, &ledger, std::slice::from_ref(key), hold, &stats).await;
    }
}

/// `tasks` workers, `work(i, until, stats)` each, until `run` has passed;
/// returns once all finished (panics if one is stuck past `run + bound`).
async fn workers<F, W>(tasks: usize, run: Duration, bound: Duration, work: F) -> Arc<Stats>
where
    F: Fn(usize, Instant, Arc<Stats>) -> W,
    W: std::future::Future<Output = ()> + Send + 'static,
{
    let stats = Arc::new(Stats::default());
    let until = Instant::now() + run;
    let handles: Vec<_> = (0..tasks)
        .map(|i| tokio::spawn(work(i, until, Arc::clone(&stats))))
        .collect();
    let all = futures::future::join_all(handles);
    let done = tokio::time::timeout(run + bound, all).await;
    assert!(done.is_ok(), "a worker is stuck: {}", stats.line());
    stats
}

/// `tasks` workers over `keys` until `run` has passed; returns once all
/// finished (panics if one is stuck past `run + bound`).
pub async fn contend(
    lock: &LockClient,
    ledger: &Arc<Ledger>,
    keys: &Arc<Vec<String>>,
    tasks: usize,
    run: Duration,
    hold: Duration,
    bound: Duration,
) -> Arc<Stats> {
    workers(tasks, run, bound, |i, until, stats| {
        worker(
            lock.clone(),
            Arc::clone(ledger),
            Arc::clone(keys),
            i,
            until,
            hold,
            stats,
        )
    })
    .await
}

/// The critical section of a multi-key hold: enter every key's section
/// with its own fence, hold, leave them all (each section left if the
/// future is dropped, as [`critical`]'s).
pub async fn critical_all(ledger: &Arc<Ledger>, g: &MultiGuard, hold: Duration) {
    let mut inside = Vec::new();
    for (key, fence) in g.fencing_tokens() {
        inside.push(Inside {
            ledger: Arc::clone(ledger),
            key: key.to_owned(),
            writer: g.token().to_owned(),
        });
        ledger.write(key, fence, g.token(), true).await;
    }
    tokio::time::sleep(hold).await;
    for ((key, fence), section) in g.fencing_tokens().zip(inside) {
        ledger.write(key, fence, g.token(), false).await;
        section.leave().await;
    }
}

/// [`contend`] with multi-key holds: each worker takes a random 2 to 4 of
/// `keys`, named in a random order, and every fourth call a single key, so
/// multi-key and single-key holds share the keys' queues.
pub async fn contend_all(
    lock: &LockClient,
    ledger: &Arc<Ledger>,
    keys: &Arc<Vec<String>>,
    tasks: usize,
    run: Duration,
    hold: Duration,
    bound: Duration,
) -> Arc<Stats> {
    workers(tasks, run, bound, |i, until, stats| {
        let (lock, ledger, keys) = (lock.clone(), Arc::clone(ledger), Arc::clone(keys));
        async move {
            let mut rng = crate::Lcg(i as u64 * 7919 + 17);
            let mut n = 0u64;
            while Instant::now() < until {
                n += 1;
                let count = if n.is_multiple_of(4) {
                    1
                } else {
                    2 + rng.below(3) as usize
                };
                let mine: Vec<String> = (0..count)
                    .map(|_| keys[rng.below(keys.len() as u64) as usize].clone())
                    .collect();
                round(&lock, &ledger, &mine, hold, &stats).await;
            }
        }
    })
    .await
}

/// One critical section of `keys`: a single-key lock's for one key, a
/// multi-key lock's for more; a call that fails is retried.
async fn round(
    lock: &LockClient,
    ledger: &Arc<Ledger>,
    keys: &[String],
    hold: Duration,
    stats: &Stats,
) {
    let started = Instant::now();
    let waited = || {
        let waited = started.elapsed().as_micros() as u64;
        stats.max_wait_us.fetch_max(waited, Ordering::SeqCst);
    };
    loop {
        let outcome = match keys {
            [key] => {
                lock.with_lock(key, LockOptions::default(), async |g| {
                    waited();
                    critical(ledger, key, g, hold).await
                })
                .await
            }
            keys => {
                lock.with_lock_all(keys, LockOptions::default(), async |g| {
                    waited();
                    critical_all(ledger, g, hold).await
                })
                .await
            }
        };
        match outcome {
            Ok(()) => {
                stats.acquired.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(Error::LockLost { .. }) => {
                stats.lost.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Err(_) => {
                stats.errors.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Injects a fault for 3 s: every `period`, `fault(n)` for n = 0, 1, ...
/// (each after a sleep of `period`). Returns how many it injected.
pub async fn repeatedly(period: Duration, mut fault: impl AsyncFnMut(usize)) -> usize {
    let until = Instant::now() + Duration::from_secs(3);
    let mut n = 0;
    while Instant::now() < until {
        tokio::time::sleep(period).await;
        fault(n).await;
        n += 1;
    }
    n
}

pub fn key_set(n: usize) -> Arc<Vec<String>> {
    Arc::new((0..n).map(|i| format!("k{i}")).collect())
}

/// Nothing left under `prefix`: no key (after the bookkeeping's retention)
/// and no subscribed channel, but the records of clients that did not shut
/// down (a killed process's name outlives its holds by design, for
/// operators), each with its TTL.
pub async fn assert_clean(admin: &Client, prefix: &str) {
    let pattern = format!("{prefix}:*");
    let locks = format!("{prefix}:4:{{*");
    let clean = eventually(LEASE + RETENTION + Duration::from_secs(3), || async {
        keys(admin, &locks).await.is_empty() && channels(admin, &locks).await.is_empty()
    })
    .await;
    assert!(
        clean,
        "left behind under {prefix}: keys {:?}, channels {:?}",
        keys(admin, &pattern).await,
        channels(admin, &pattern).await
    );
    for k in keys(admin, &pattern).await {
        assert!(k.starts_with(&format!("{prefix}:4:client:")), "{k}");
        let pttl: i64 = admin.pttl(&k).await.unwrap();
        assert!(
            pttl > 0 && pttl <= 25 * 3600 * 1000,
            "{k}: a client record without its TTL ({pttl})"
        );
    }
}

pub fn assert_safe(name: &str, t: Totals) {
    assert!(t.accepted > 0, "{name}: nothing was written");
    assert_eq!(t.overlaps, 0, "{name}: two holders overlapped: {t:?}");
    assert_eq!(t.stale, 0, "{name}: a stale holder wrote: {t:?}");
}

/// A server with its admin connection, the ledger, a proxy in front of the
/// server, and two clients of `prefix`: one through the proxy, one direct.
/// (Bind `_server` when destructuring: a field left to `..` is dropped at
/// once, and the server with it.)
pub struct Proxied {
    pub _server: RedisServer,
    pub admin: Client,
    pub ledger: Arc<Ledger>,
    pub proxy: Proxy,
    pub through: LockClient,
    pub direct: LockClient,
}

pub async fn proxied(prefix: &str) -> Proxied {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    let proxy = Proxy::start(server.port).await;
    let through = lock_client(&proxy.url(), prefix).await;
    let direct = lock_client(&server.url(), prefix).await;
    Proxied {
        _server: server,
        admin,
        ledger,
        proxy,
        through,
        direct,
    }
}
