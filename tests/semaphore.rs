//! The counting semaphore through its public API, against a real
//! redis-server: never more than the limit (checked by an independent
//! ledger), fencing tokens, limits that disagree, one retry per freed
//! permit, crash recovery of a SIGKILLed holder process, cancellation at
//! random points, renewal and loss, and bad input.

use relaylock_testkit as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{Error, LockClient, SemaphoreOptions};
use support::ledger::Ledger;
use support::{command_calls, delta, eventually, Admin, RedisServer};

async fn client(server: &RedisServer) -> LockClient {
    support::client(&server.url()).await
}

/// A client whose default lease is `lease` (renewed by the watchdog).
async fn client_with_lease(url: &str, lease: Duration) -> LockClient {
    support::preset(url)
        .default_lease(lease)
        .build()
        .await
        .expect("connect")
}

/// Three clients, 24 tasks, mixed 1- and 2-permit calls on a 3-permit
/// semaphore: the ledger (on a server of its own) never sees more than 3
/// permits inside; every hold's fence is unique and each task's increase;
/// everything is given back at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_than_the_limit_inside() {
    const LIMIT: u32 = 3;
    const TASKS: usize = 24;
    const ROUNDS: usize = 8;
    let server = RedisServer::start();
    let ledger = Ledger::start().await;
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let sem = clients[i % clients.len()].semaphore("pool", LIMIT).unwrap();
        let ledger = Arc::clone(&ledger);
        tasks.push(tokio::spawn(async move {
            let mut fences = Vec::new();
            for r in 0..ROUNDS {
                let n = if (i + r) % 4 == 0 { 2 } else { 1 };
                let p = sem
                    .acquire_with(SemaphoreOptions::default().permits(n))
                    .await
                    .unwrap();
                assert_eq!(p.permits(), n);
                if let Some(last) = fences.last() {
                    assert!(p.fencing_token() > *last, "fences increase");
                }
                fences.push(p.fencing_token());
                ledger.enter_counted("pool", n, LIMIT).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
                ledger.leave_counted("pool", n).await;
                p.release().await.unwrap();
            }
            fences
        }));
    }
    let started = Instant::now();
    let mut all = Vec::new();
    let admin = server.admin().await;
    for t in tasks {
        let fences = match tokio::time::timeout(Duration::from_secs(60), t).await {
            Ok(f) => f.unwrap(),
            Err(_) => stuck(&admin, &clients, "pool", LIMIT).await,
        };
        all.extend(fences);
    }
    let took = started.elapsed();
    let t = ledger.totals(&["pool"]).await;
    println!(
        "semaphore ledger: {} entries in {took:?}, most inside {}, over the limit {}",
        t.entered, t.max_inside, t.over_limit
    );
    assert_eq!(t.entered, (TASKS * ROUNDS) as u64);
    assert_eq!(t.over_limit, 0, "more than {LIMIT} permits inside");
    assert!(t.max_inside <= u64::from(LIMIT));
    assert!(
        t.max_inside >= 2,
        "the semaphore never let two holds in together"
    );
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a fencing token was issued twice");
    // Everything comes back: a reservation made for a client whose last
    // waiter had just left lapses after its grace.
    let sem = clients[0].semaphore("pool", LIMIT).unwrap();
    assert!(
        eventually(Duration::from_secs(2), || async {
            sem.available().await.unwrap() == LIMIT && sem.queued_clients().await.unwrap() == 0
        })
        .await,
        "permits stayed taken or a client stayed queued"
    );
}

/// Panics for a task that is stuck on the semaphore `key` of `clients`,
/// with what Redis holds, to diagnose the stall.
async fn stuck(admin: &Client, clients: &[LockClient], key: &str, limit: u32) -> ! {
    let name = clients[0].semaphore(key, limit).unwrap().redis_key();
    let v: Option<String> = admin.get(&name).await.unwrap();
    let h: Vec<(String, f64)> = admin
        .zrange(format!("{name}:h"), 0, -1, None, false, None, true)
        .await
        .unwrap();
    let ids: Vec<&str> = clients.iter().map(|c| c.client_id()).collect();
    panic!("a task is stuck: value {v:?}, holds {h:?}, clients {ids:?}");
}

/// Fair across clients: a waiter that needs 3 of 4 permits, alone in its
/// client, is not overtaken forever by a stream of 1-permit callers in two
/// other clients; once its client is first in the queue, it gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_is_not_starved_by_small_ones() {
    let server = RedisServer::start();
    let streamers = [client(&server).await, client(&server).await];
    let big = client(&server).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut stream = Vec::new();
    for i in 0..12 {
        let sem = streamers[i % 2].semaphore("fair", 4).unwrap();
        let stop = Arc::clone(&stop);
        stream.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = sem.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
                p.release().await.unwrap();
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let got = big
        .semaphore("fair", 4)
        .unwrap()
        .acquire_with(
            SemaphoreOptions::default()
                .permits(3)
                .wait(Duration::from_secs(10)),
        )
        .await;
    let waited = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let p = got.expect("the 3-permit waiter was starved");
    p.release().await.unwrap();
    let mut small = 0;
    for s in stream {
        small += s.await.unwrap();
    }
    println!("3 permits after {waited:?}, while 12 streamers took {small} single permits");
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

/// Limits that disagree: each caller is admitted by its own limit, counting
/// every hold. With 5 of a limit-8 semaphore held, a limit-4 caller is
/// refused and a limit-8 caller admitted; once the total is down to 3, the
/// limit-4 caller gets in.
#[tokio::test]
async fn limits_that_disagree_apply_to_each_callers_own_admission() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let wide = c.semaphore("mixed", 8).unwrap();
    let narrow = c.semaphore("mixed", 4).unwrap();
    let five = wide
        .acquire_with(SemaphoreOptions::default().permits(5))
        .await
        .unwrap();
    assert!(narrow.try_acquire().await.unwrap().is_none());
    assert_eq!(narrow.available().await.unwrap(), 0);
    assert_eq!(wide.available().await.unwrap(), 3);
    let sixth = wide.try_acquire().await.unwrap().expect("8 admits a sixth");
    five.release().await.unwrap();
    let two = wide
        .acquire_with(SemaphoreOptions::default().permits(2))
        .await
        .unwrap();
    // Held: 1 + 2 = 3; the narrow caller fits (3 + 1 <= 4), but not with 2.
    assert!(narrow
        .try_acquire_with(SemaphoreOptions::default().permits(2))
        .await
        .unwrap()
        .is_none());
    let fourth = narrow
        .try_acquire()
        .await
        .unwrap()
        .expect("4 admits a fourth");
    assert!(narrow.try_acquire().await.unwrap().is_none());
    for p in [sixth, two, fourth] {
        p.release().await.unwrap();
    }
    assert_eq!(wide.available().await.unwrap(), 8);
}

/// 200 waiters in two clients on an 8-permit semaphore, several rounds:
/// acquire script calls per acquisition, read from the server's
/// commandstats, stay at most 1.25: a release that
/// frees a permit wakes one waiter, not a herd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_retry_per_freed_permit() {
    const WAITERS: usize = 200;
    const ROUNDS: usize = 3;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let clients = [client(&server).await, client(&server).await];
    // A fixed lease: no watchdog renewals among the counted scripts.
    let opts = SemaphoreOptions::default().lease(Duration::from_secs(20));
    let before = command_calls(&admin).await;
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let sem = clients[i % 2].semaphore("eight", 8).unwrap();
        let opts = opts.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let p = sem.acquire_with(opts.clone()).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                p.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("a waiter is stuck")
            .unwrap();
    }
    let after = command_calls(&admin).await;
    let acquisitions = (WAITERS * ROUNDS) as u64;
    // Every acquisition is released once; the queue LEAVEs of the last
    // waiters are script calls too, so this over-counts attempts slightly.
    let scripts = delta(&before, &after, "evalsha");
    let attempts = scripts - acquisitions;
    let per_acq = attempts as f64 / acquisitions as f64;
    println!(
        "semaphore one_retry_per_freed_permit: {acquisitions} acquisitions, {attempts} acquire script calls, {per_acq:.3} per acquisition, {} PUBLISH",
        delta(&before, &after, "publish"),
    );
    assert!(scripts >= acquisitions);
    assert!(
        per_acq <= 1.25,
        "{per_acq:.3} acquire calls per acquisition"
    );
}

const CHILD_ENV: &str = "RELAYLOCK_SEMAPHORE_CHILD";
const CHILD_LEASE: Duration = Duration::from_secs(1);

/// A holder process SIGKILLed while holding both permits of a semaphore:
/// a waiter in this process gets them within the lease + 1 s, by the
/// server clock alone (nobody releases them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permits_come_back_within_the_lease() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        // Child: take both permits (renewed by the watchdog), say so, hang.
        let c = client_with_lease(&url, CHILD_LEASE).await;
        let p = c
            .semaphore("crash", 2)
            .unwrap()
            .acquire_with(SemaphoreOptions::default().permits(2))
            .await
            .unwrap();
        println!("HELD {}", p.token());
        tokio::time::sleep(Duration::from_secs(60)).await;
        return;
    }
    let server = RedisServer::start();
    let c = client_with_lease(&server.url(), CHILD_LEASE).await;
    let sem = c.semaphore("crash", 2).unwrap();
    let mut worst = Duration::ZERO;
    for run in 0..3 {
        let (mut child, _) = support::child_holding(
            "a_killed_holders_permits_come_back_within_the_lease",
            CHILD_ENV,
            &server.url(),
            "HELD ",
        )
        .await;
        let waiter = {
            let sem = sem.clone();
            tokio::spawn(async move {
                let p = sem.acquire().await.unwrap();
                let at = Instant::now();
                p.release().await.unwrap();
                at
            })
        };
        // Held well past its first lease: the child's watchdog renews it.
        tokio::time::sleep(CHILD_LEASE * 2).await;
        assert!(!waiter.is_finished(), "the child's renewed hold was lost");
        child.kill().unwrap();
        let killed = Instant::now();
        child.wait().unwrap();
        let at = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter is stuck")
            .unwrap();
        let took = at - killed;
        println!("run {run}: permits back {took:?} after SIGKILL (lease {CHILD_LEASE:?})");
        worst = worst.max(took);
    }
    assert!(worst <= CHILD_LEASE + Duration::from_secs(1), "{worst:?}");
}

/// Acquisitions cancelled at random points (while waiting, in flight, while
/// holding), across two clients: once everything has settled, every permit
/// is free and no client is queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_at_random_points_leaves_no_permit_taken() {
    const LIMIT: u32 = 4;
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let mut rng = support::Lcg(0x5eed);
    let mut tasks = Vec::new();
    for i in 0..120 {
        let sem = clients[i % 2].semaphore("cancel", LIMIT).unwrap();
        let n = 1 + rng.below(2) as u32;
        let give_up = Duration::from_micros(rng.below(20_000));
        let hold = Duration::from_micros(rng.below(5_000));
        tasks.push(tokio::spawn(async move {
            let opts = SemaphoreOptions::default().permits(n);
            // Dropped at whatever await point the deadline finds it.
            let _ = tokio::time::timeout(give_up, async {
                let p = sem.acquire_with(opts).await.unwrap();
                tokio::time::sleep(hold).await;
                drop(p);
            })
            .await;
        }));
        if i % 10 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let sem = clients[0].semaphore("cancel", LIMIT).unwrap();
    let settled = eventually(Duration::from_secs(3), || async {
        sem.available().await.unwrap() == LIMIT && sem.queued_clients().await.unwrap() == 0
    })
    .await;
    assert!(
        settled,
        "available {} of {LIMIT}, {} clients queued",
        sem.available().await.unwrap(),
        sem.queued_clients().await.unwrap()
    );
    // And the semaphore still works for everyone.
    let all = sem
        .acquire_with(
            SemaphoreOptions::default()
                .permits(LIMIT)
                .wait(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    all.release().await.unwrap();
}

/// A wait is bounded by the soonest expiry among the holds: a holder that
/// vanished without releasing (its permit leaked with a fixed lease) costs
/// a waiter at most that lease, without any message.
#[tokio::test]
async fn a_wait_is_bounded_by_the_soonest_expiry() {
    let server = RedisServer::start();
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let lease = Duration::from_millis(400);
    let p = holder
        .semaphore("leak", 1)
        .unwrap()
        .acquire_with(SemaphoreOptions::default().lease(lease))
        .await
        .unwrap();
    let taken = Instant::now();
    // Never released: the hold ends with its lease, by the server clock.
    std::mem::forget(p);
    let q = waiter
        .semaphore("leak", 1)
        .unwrap()
        .acquire_with(SemaphoreOptions::default().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    let took = taken.elapsed();
    println!("leaked permit back after {took:?} (lease {lease:?})");
    assert!(took >= lease - Duration::from_millis(50), "{took:?}");
    assert!(took <= lease + Duration::from_millis(500), "{took:?}");
    q.release().await.unwrap();
}

/// The watchdog renews a hold taken without a lease; `extend` sets one; a
/// hold removed behind the holder's back fires `lost()` and its release
/// reports the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_extend_and_loss() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let c = client_with_lease(&server.url(), Duration::from_millis(300)).await;
    let sem = c.semaphore("renewed", 1).unwrap();
    let p = sem.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(p.is_held());
    assert!(
        sem.try_acquire().await.unwrap().is_none(),
        "renewed hold lost"
    );
    p.extend(Duration::from_secs(5)).await.unwrap();
    // Expired behind the holder's back (its expiry moved into the past, as
    // a paused holder's would be): the next renewal finds it gone.
    let _: i64 = admin
        .zadd(
            format!("{}:h", sem.redis_key()),
            Some(SetOptions::XX),
            None,
            false,
            false,
            (1.0, p.token()),
        )
        .await
        .unwrap();
    let fired = tokio::time::timeout(Duration::from_secs(3), p.lost()).await;
    assert!(fired.is_ok(), "lost() did not fire");
    assert!(!p.is_held());
    assert!(matches!(p.release().await, Err(Error::LockLost { .. })));

    // A fixed lease that ran out: extend and release report the loss.
    let q = sem
        .acquire_with(SemaphoreOptions::default().lease(Duration::from_millis(100)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(matches!(
        q.extend(Duration::from_secs(1)).await,
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(q.release().await, Err(Error::LockLost { .. })));
}

/// Takes one permit of `sem` within `wait` and keeps it (the holds of these
/// scenarios have long leases); returns how long it took.
async fn take_within(sem: relaylock::Semaphore, n: u32, wait: Duration) -> Result<Duration, Error> {
    let started = Instant::now();
    let p = sem
        .acquire_with(SemaphoreOptions::default().permits(n).wait(wait))
        .await?;
    std::mem::forget(p);
    Ok(started.elapsed())
}

const LONG: Duration = Duration::from_secs(20);

/// Releasing a 3-permit hold while three 1-permit waiters of the same
/// client wait lets all three in, not one (the others would sleep on a
/// hold's lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_of_k_permits_serves_k_local_waiters() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let sem = c.semaphore("s", 3).unwrap();
    let big = sem
        .acquire_with(SemaphoreOptions::default().lease(LONG).permits(3))
        .await
        .unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|_| tokio::spawn(take_within(sem.clone(), 1, Duration::from_secs(4))))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    big.release().await.unwrap();
    for w in waiters {
        w.await
            .unwrap()
            .expect("a waiter timed out with free permits");
    }
    println!(
        "three local waiters in {:?} after the release",
        released.elapsed()
    );
    assert!(released.elapsed() < Duration::from_secs(1));
}

/// A client admitted while another of its waiters still waits keeps its
/// place in the queue, so the next release reaches that waiter too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_local_waiter_is_not_stranded_after_the_first_is_admitted() {
    let server = RedisServer::start();
    let d = client(&server).await;
    let c = client(&server).await;
    let opts = SemaphoreOptions::default().lease(LONG);
    let d1 = d
        .semaphore("s", 2)
        .unwrap()
        .acquire_with(opts.clone())
        .await
        .unwrap();
    let d2 = d
        .semaphore("s", 2)
        .unwrap()
        .acquire_with(opts)
        .await
        .unwrap();
    let waiters: Vec<_> = (0..2)
        .map(|_| {
            tokio::spawn(take_within(
                c.semaphore("s", 2).unwrap(),
                1,
                Duration::from_secs(4),
            ))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    d1.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    d2.release().await.unwrap();
    for w in waiters {
        w.await
            .unwrap()
            .expect("a waiter timed out with a free permit");
    }
    assert!(released.elapsed() < Duration::from_secs(1));
}

/// When a queue head that blocks the others (it needs more than is free)
/// gives up, the one behind it that fits is served at once (the leave walks
/// the queue), not after a hold's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_queue_head_that_leaves_frees_the_ones_behind() {
    let server = RedisServer::start();
    let d = client(&server).await;
    let c = client(&server).await;
    let e = client(&server).await;
    let _held = d
        .semaphore("s", 4)
        .unwrap()
        .acquire_with(SemaphoreOptions::default().lease(LONG).permits(2))
        .await
        .unwrap();
    let big = tokio::spawn(take_within(
        c.semaphore("s", 4).unwrap(),
        3,
        Duration::from_millis(300),
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let small = take_within(e.semaphore("s", 4).unwrap(), 1, Duration::from_secs(4))
        .await
        .expect("stranded behind a queue head that left");
    assert!(matches!(big.await.unwrap(), Err(Error::Timeout { .. })));
    println!("the small request got in after {small:?} (the big one gave up at 300 ms)");
    assert!(small < Duration::from_secs(1));
}

/// A client's queue entry asks for what its waiters need now, not the most
/// any of them ever needed: after a 3-permit waiter gave up, a 1-permit
/// waiter of the same client gets one of the 2 free permits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_large_need_does_not_stick() {
    let server = RedisServer::start();
    let d = client(&server).await;
    let c = client(&server).await;
    let opts = SemaphoreOptions::default().lease(LONG);
    let _held = d
        .semaphore("s", 4)
        .unwrap()
        .acquire_with(opts.clone().permits(2))
        .await
        .unwrap();
    let h = c
        .semaphore("s", 4)
        .unwrap()
        .acquire_with(opts)
        .await
        .unwrap();
    let small = {
        let sem = c.semaphore("s", 4).unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            take_within(sem, 1, Duration::from_secs(4)).await
        })
    };
    let big = take_within(c.semaphore("s", 4).unwrap(), 3, Duration::from_millis(300)).await;
    assert!(matches!(big, Err(Error::Timeout { .. })));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    h.release().await.unwrap();
    small.await.unwrap().expect("the small waiter was stranded");
    assert!(released.elapsed() < Duration::from_secs(1));
}

/// Clients with equal load get equal shares (Jain's index at least 0.97
/// over 4 clients). A client admitted while its other waiters still
/// wait keeps its place in the queue (at the back), so clients take turns
/// instead of a client that holds more permits serving itself more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_with_equal_load_get_equal_shares() {
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&server).await);
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for i in 0..64 {
        let sem = clients[i % 4].semaphore("shares", 8).unwrap();
        let stop = Arc::clone(&stop);
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let p = sem.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                p.release().await.unwrap();
                n += 1;
            }
            (i % 4, n)
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut per = [0u64; 4];
    for t in tasks {
        let (c, n) = t.await.unwrap();
        per[c] += n;
    }
    let sum: f64 = per.iter().map(|&x| x as f64).sum();
    let squares: f64 = per.iter().map(|&x| (x as f64).powi(2)).sum();
    let jain = sum * sum / (4.0 * squares);
    println!("acquisitions per client {per:?}, Jain {jain:.3}");
    assert!(jain >= 0.97, "Jain {jain:.3} over clients {per:?}");
}

/// Waiters of one client that arrive together at an idle semaphore fill
/// its free permits together (each admission reserves the next permit for
/// the next local waiter), without waiting for a release or a re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_local_waiters_fills_the_free_permits_at_once() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let barrier = Arc::new(tokio::sync::Barrier::new(4));
    let started = Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (sem, barrier) = (c.semaphore("burst", 4).unwrap(), Arc::clone(&barrier));
            tokio::spawn(async move {
                let p = sem.acquire().await.unwrap();
                // All four must be inside at once to pass.
                barrier.wait().await;
                p.release().await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("the permits were not filled together")
            .unwrap();
    }
    println!(
        "4 local waiters inside together after {:?}",
        started.elapsed()
    );
}

// Fault scenarios (as tests/faults.rs runs them for the lock): the
// contending workers retry errors as a caller would; the counted ledger,
// on a server of its own, sees every section.

/// `tasks` workers over `clients` take permits of `key` (limit `limit`)
/// for `run`, entering the counted ledger for 2 ms each, retrying errors.
/// Returns (acquisitions, errors); panics if a worker is stuck.
async fn contend_permits(
    clients: &[LockClient],
    ledger: &Arc<Ledger>,
    key: &str,
    limit: u32,
    tasks: usize,
    run: Duration,
) -> (u64, u64) {
    let until = Instant::now() + run;
    let workers: Vec<_> = (0..tasks)
        .map(|i| {
            let sem = clients[i % clients.len()].semaphore(key, limit).unwrap();
            let (ledger, key) = (Arc::clone(ledger), key.to_owned());
            tokio::spawn(async move {
                let (mut n, mut errors) = (0u64, 0u64);
                while Instant::now() < until {
                    let p = match sem
                        .acquire_with(SemaphoreOptions::default().wait(Duration::from_secs(10)))
                        .await
                    {
                        Ok(p) => p,
                        Err(Error::Timeout { .. }) => panic!("a worker waited 10 s"),
                        Err(_) => {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    };
                    ledger.enter_counted(&key, 1, limit).await;
                    tokio::select! {
                        _ = p.lost() => {}
                        _ = tokio::time::sleep(Duration::from_millis(2)) => {}
                    }
                    ledger.leave_counted(&key, 1).await;
                    if p.release().await.is_err() {
                        errors += 1;
                    }
                    n += 1;
                }
                (n, errors)
            })
        })
        .collect();
    support::join_workers(workers, run + Duration::from_secs(15)).await
}

/// CLIENT KILL of the command and the subscriber connections, every
/// 300 ms, during contention: never over the limit, nobody stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kills_during_contention_break_nothing() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    let clients = [
        support::fault_client(&server.url()).await,
        support::fault_client(&server.url()).await,
    ];
    let run = Duration::from_secs(3);
    let killer = tokio::spawn(async move {
        let mut kills = 0;
        let until = Instant::now() + run;
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let kind = if kills % 2 == 0 { "pubsub" } else { "normal" };
            support::client_kill(&admin, &["TYPE", kind]).await;
            kills += 1;
        }
        kills
    });
    let (n, errors) = contend_permits(&clients, &ledger, "ck", 3, 12, run).await;
    let kills = killer.await.unwrap();
    let t = ledger.totals(&["ck"]).await;
    println!("semaphore client kills: {kills} kills, {n} acquisitions, {errors} errors retried, most inside {}, over the limit {}", t.max_inside, t.over_limit);
    assert_eq!(t.over_limit, 0);
    assert!(n > 0);
}

/// The server frozen (SIGSTOP) for 300 ms, shorter than the 1 s lease,
/// twice during contention: nothing is lost, never over the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_server_pause_loses_nothing() {
    let server = Arc::new(RedisServer::start());
    let ledger = Ledger::start().await;
    let clients = [
        support::fault_client(&server.url()).await,
        support::fault_client(&server.url()).await,
    ];
    let pauser = {
        let server = Arc::clone(&server);
        tokio::spawn(async move {
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(700)).await;
                server.pause();
                tokio::time::sleep(Duration::from_millis(300)).await;
                server.resume();
            }
        })
    };
    let (n, errors) = contend_permits(&clients, &ledger, "pz", 3, 12, Duration::from_secs(3)).await;
    pauser.await.unwrap();
    let t = ledger.totals(&["pz"]).await;
    println!("semaphore pauses: {n} acquisitions, {errors} errors retried, most inside {}, over the limit {}", t.max_inside, t.over_limit);
    assert_eq!(t.over_limit, 0);
}

/// A restart without persistence while two permits are held: the holders
/// learn the loss (their renewal finds the holds gone), the waiters recover
/// (no stuck waiter), the new holders never exceed the limit, and fencing
/// tokens keep increasing across the restart (they come from the server
/// clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence() {
    let mut server = RedisServer::start();
    let ledger = Ledger::start().await;
    let clients = [
        support::fault_client(&server.url()).await,
        support::fault_client(&server.url()).await,
    ];
    let sem = clients[0].semaphore("rs", 2).unwrap();
    let old = [sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
    let before = old.iter().map(|p| p.fencing_token()).max().unwrap();
    let waiting = {
        let (clients, ledger) = (clients.clone(), Arc::clone(&ledger));
        tokio::spawn(async move {
            contend_permits(&clients, &ledger, "rs", 2, 8, Duration::from_millis(2500)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    let restarted = Instant::now();
    for p in &old {
        tokio::time::timeout(Duration::from_secs(3), p.lost())
            .await
            .expect("a holder never learned its permit was lost");
    }
    let noticed = restarted.elapsed();
    let (n, errors) = waiting.await.unwrap();
    let after = sem.acquire().await.unwrap();
    let t = ledger.totals(&["rs"]).await;
    println!("semaphore restart: holders learned the loss within {noticed:?}; {n} acquisitions after, {errors} errors retried; most inside {}, over the limit {}", t.max_inside, t.over_limit);
    assert!(n > 0);
    assert_eq!(t.over_limit, 0);
    assert!(
        after.fencing_token() > before,
        "fencing tokens went backwards"
    );
    for p in old {
        assert!(matches!(p.release().await, Err(Error::LockLost { .. })));
    }
    after.release().await.unwrap();
}

/// Mixed needs (1 to 3 permits of 3) from three clients. A reservation
/// part-taken by one waiter, whose rest the client's next waiter (needing
/// more) cannot use, passes on at once (the script-level test,
/// `a_reservation_too_small_for_its_waiter_passes_on_at_once`, pins the
/// rule), so the queue head needing all 3 does not lose its turn again and
/// again. The assertion is the liveness bound: no waiter slept on a hold's
/// lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_needs_pass_unusable_reservations_on() {
    const LIMIT: u32 = 3;
    let lease = Duration::from_secs(2);
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client_with_lease(&server.url(), lease).await);
    }
    let until = Instant::now() + Duration::from_secs(4);
    let workers: Vec<_> = (0..9)
        .map(|i| {
            let sem = clients[i % clients.len()]
                .semaphore("mixed", LIMIT)
                .unwrap();
            tokio::spawn(async move {
                let mut rng = support::Lcg(i as u64 + 1);
                let (mut longest, mut n) = (Duration::ZERO, 0u64);
                while Instant::now() < until {
                    let need = 1 + rng.below(u64::from(LIMIT)) as u32;
                    let asked = Instant::now();
                    let p = sem
                        .acquire_with(
                            SemaphoreOptions::default()
                                .permits(need)
                                .wait(Duration::from_secs(20)),
                        )
                        .await
                        .expect("a permit within 20 s");
                    longest = longest.max(asked.elapsed());
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    p.release().await.unwrap();
                    n += 1;
                }
                (longest, n)
            })
        })
        .collect();
    let (mut longest, mut n) = (Duration::ZERO, 0);
    for w in workers {
        let (l, k) = tokio::time::timeout(Duration::from_secs(40), w)
            .await
            .expect("a worker is stuck")
            .unwrap();
        longest = longest.max(l);
        n += k;
    }
    eprintln!("mixed needs: {n} acquisitions, longest wait {longest:?} (lease {lease:?})");
    assert!(n > 0);
    assert!(
        longest < lease,
        "longest wait {longest:?}: a waiter slept on a lease"
    );
}
