//! The read-write lock through its public API, against a real
//! redis-server: a writer is never inside with anyone (an independent
//! ledger), readers share, a writer is not starved by a stream of readers,
//! readers queued behind a write get in together, and a crashed holder's
//! hold ends with its lease.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::Either;
use relaylock::{Error, LockClient, LockOptions};
use support::ledger::Ledger;
use support::{Admin, RedisServer};

async fn client(server: &RedisServer) -> LockClient {
    support::client(&server.url()).await
}

/// The ledger's weight of a writer: more than all readers together, so a
/// writer inside with anyone is over the ledger's limit.
const WRITER: u32 = 1_000;

/// Three clients, 24 tasks, one write in ten: the ledger never sees a
/// writer together with anyone, readers are inside together, and fencing
/// tokens are unique.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_never_inside_with_anyone() {
    let server = RedisServer::start();
    let ledger = Ledger::start().await;
    let clients = [
        client(&server).await,
        client(&server).await,
        client(&server).await,
    ];
    let mut tasks = Vec::new();
    for i in 0..24 {
        let rw = clients[i % 3].rw_lock("doc");
        let ledger = Arc::clone(&ledger);
        tasks.push(tokio::spawn(async move {
            let mut fences = Vec::new();
            for r in 0..8 {
                let write = (i * 8 + r) % 10 == 0;
                let (fence, weight, release) = if write {
                    let w = rw.write().await.unwrap();
                    (w.fencing_token(), WRITER, Either::Left(w))
                } else {
                    let g = rw.read().await.unwrap();
                    (g.fencing_token(), 1, Either::Right(g))
                };
                fences.push(fence);
                ledger.enter_counted("doc", weight, WRITER).await;
                if !write {
                    // Readers alone, to see them share.
                    ledger.enter_counted("doc-readers", 1, WRITER).await;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
                if !write {
                    ledger.leave_counted("doc-readers", 1).await;
                }
                ledger.leave_counted("doc", weight).await;
                match release {
                    Either::Left(w) => w.release().await.unwrap(),
                    Either::Right(g) => g.release().await.unwrap(),
                }
            }
            fences
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(
            tokio::time::timeout(Duration::from_secs(60), t)
                .await
                .expect("a task is stuck")
                .unwrap(),
        );
    }
    let t = ledger.totals(&["doc"]).await;
    let readers = ledger.totals(&["doc-readers"]).await;
    println!(
        "rwlock ledger: {} entries ({} reads), most readers inside at once {}, a writer with someone {} times",
        t.entered, readers.entered, readers.max_inside, t.over_limit
    );
    assert_eq!(t.entered, 24 * 8);
    assert!(readers.entered < t.entered, "no write ran");
    assert_eq!(t.over_limit, 0, "a writer was inside with someone");
    assert!(
        readers.max_inside >= 2,
        "readers were never inside together"
    );
    let n = all.len();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "a fencing token was issued twice");
}

/// Writer preference: 32 readers in a loop (two clients, 1 s leases) and
/// one writer in a third client: once the writer is queued, new readers
/// queue behind it, so it waits at most one read lease (+ 1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_not_starved_by_continuous_reads() {
    let server = RedisServer::start();
    let lease = Duration::from_secs(1);
    let readers_clients = [client(&server).await, client(&server).await];
    let writer = client(&server).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for i in 0..32 {
        let rw = readers_clients[i % 2].rw_lock("hot");
        let stop = Arc::clone(&stop);
        readers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = rw
                    .read_with(LockOptions::default().lease(lease))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                g.release().await.unwrap();
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut waits = Vec::new();
    for _ in 0..3 {
        let started = Instant::now();
        let w = writer
            .rw_lock("hot")
            .write_with(LockOptions::default().wait(lease * 5))
            .await
            .expect("the writer was starved");
        waits.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
        w.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut reads = 0;
    for r in readers {
        reads += r.await.unwrap();
    }
    println!("writer waits {waits:?} against 32 looping readers ({reads} reads)");
    for w in waits {
        assert!(w <= lease + Duration::from_secs(1), "{w:?}");
    }
}

/// Readers of two clients that queued behind a held write all get in when
/// it ends, together (all inside at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_a_write_get_in_together() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let w = clients[0].rw_lock("batch").write().await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let readers: Vec<_> = (0..20)
        .map(|i| {
            let (rw, barrier) = (clients[i % 2].rw_lock("batch"), Arc::clone(&barrier));
            tokio::spawn(async move {
                let g = rw.read().await.unwrap();
                let at = Instant::now();
                barrier.wait().await;
                g.release().await.unwrap();
                at
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(clients[1]
        .rw_lock("batch")
        .try_read()
        .await
        .unwrap()
        .is_none());
    let released = Instant::now();
    w.release().await.unwrap();
    let mut last = Duration::ZERO;
    for r in readers {
        let at = tokio::time::timeout(Duration::from_secs(5), r)
            .await
            .expect("the readers did not get in together")
            .unwrap();
        last = last.max(at - released);
    }
    println!("20 readers in two clients all inside {last:?} after the write's release");
}

/// A writer queued while a read is held keeps later readers out; a write
/// and a read of a lock with a fixed lease that ran out report the loss.
#[tokio::test]
async fn a_queued_writer_stops_new_readers_and_losses_are_reported() {
    let server = RedisServer::start();
    let (a, b) = (client(&server).await, client(&server).await);
    let r = a.rw_lock("k").read().await.unwrap();
    assert!(b.rw_lock("k").try_read().await.unwrap().is_some_and(|g| {
        drop(g);
        true
    }));
    assert!(b.rw_lock("k").try_write().await.unwrap().is_none());
    let writer = {
        let rw = b.rw_lock("k");
        tokio::spawn(async move { rw.write().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Queued writer: a new reader (another client) is refused.
    assert!(a.rw_lock("k").try_read().await.unwrap().is_none());
    r.release().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .expect("the writer was not woken by the last read's release")
        .unwrap();
    w.release().await.unwrap();

    let short = a
        .rw_lock("k")
        .write_with(LockOptions::default().lease(Duration::from_millis(100)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(matches!(short.release().await, Err(Error::LockLost { .. })));
    let g = a.rw_lock("k").read().await.unwrap();
    g.release().await.unwrap();
}

const CHILD_ENV: &str = "RELAYLOCK_RWLOCK_CHILD";

/// A reader process SIGKILLed while holding a read lock (1 s lease, renewed
/// by its watchdog while it lived): a writer in this process gets the lock
/// within the lease + 1 s of the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_readers_hold_ends_with_its_lease() {
    let lease = Duration::from_secs(1);
    if let Ok(url) = std::env::var(CHILD_ENV) {
        let c = support::preset(&url)
            .default_lease(lease)
            .build()
            .await
            .unwrap();
        let g = c.rw_lock("crash").read().await.unwrap();
        println!("HELD {}", g.token());
        tokio::time::sleep(Duration::from_secs(60)).await;
        return;
    }
    let server = RedisServer::start();
    let c = support::preset(&server.url())
        .default_lease(lease)
        .build()
        .await
        .unwrap();
    let (mut child, _) = support::child_holding(
        "a_killed_readers_hold_ends_with_its_lease",
        CHILD_ENV,
        &server.url(),
        "HELD ",
    )
    .await;
    let writer = {
        let rw = c.rw_lock("crash");
        tokio::spawn(async move {
            let w = rw.write().await.unwrap();
            let at = Instant::now();
            w.release().await.unwrap();
            at
        })
    };
    tokio::time::sleep(lease * 2).await;
    assert!(
        !writer.is_finished(),
        "the child's renewed read hold was lost"
    );
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let at = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer is stuck")
        .unwrap();
    let took = at - killed;
    println!("the writer got in {took:?} after the reader's SIGKILL (lease {lease:?})");
    assert!(took <= lease + Duration::from_secs(1), "{took:?}");
}

/// Readers of one client that queued before a writer all get in before it
/// when the write ahead of them ends (the client's queue entry asks for
/// every one of them, not for one permit, which would let one reader per
/// client in per write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_queued_before_a_writer_all_go_first() {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let w = a.rw_lock("order").write().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let (rw, order) = (b.rw_lock("order"), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let g = rw.read().await.unwrap();
            order.lock().unwrap().push(format!("reader{i}"));
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    {
        let (rw, order) = (c.rw_lock("order"), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let g = rw.write().await.unwrap();
            order.lock().unwrap().push("writer".to_owned());
            g.release().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    w.release().await.unwrap();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(5), t)
            .await
            .expect("stuck")
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    println!("order after the write: {order:?}");
    assert_eq!(
        order.last().map(String::as_str),
        Some("writer"),
        "{order:?}"
    );
}

/// A readers' reservation that is never taken (its client
/// queued and went away) must not strand the writer queued behind it: the
/// other role hears the reservation too and re-checks after the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_reservation_of_the_other_role_strands_nobody() {
    use fred::prelude::*;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (a, c) = (client(&server).await, client(&server).await);
    let rw = a.rw_lock("ghost");
    let w = rw.write().await.unwrap();
    // A reader client that queues and never comes back: its entry, made
    // by the script itself.
    let name = rw.redis_key();
    let keys = vec![
        name.clone(),
        format!("{name}:h"),
        format!("{name}:t"),
        format!("{name}:void:ghost"),
        format!("{name}:void"),
    ];
    let args: Vec<String> = vec![
        "ghost-token".into(),
        "1".into(),
        relaylock::__scripts::RW_WRITE.to_string(),
        "30000".into(),
        "deadbeefdeadbeef".into(),
        relaylock::__scripts::SIDE_RETENTION_MS.to_string(),
        format!("{name}:ch"),
        "PUBLISH".into(),
        relaylock::__scripts::HANDOFF_GRACE_MS.to_string(),
    ];
    let refused: Vec<i64> = admin
        .eval(relaylock::__scripts::SEM_ACQUIRE, keys, args)
        .await
        .unwrap();
    assert_eq!(refused[0], 0);
    let writer = {
        let rw = c.rw_lock("ghost");
        tokio::spawn(async move {
            rw.write_with(LockOptions::default().wait(Duration::from_secs(4)))
                .await
                .map(|g| {
                    let at = Instant::now();
                    drop(g);
                    at
                })
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    w.release().await.unwrap();
    let at = writer
        .await
        .unwrap()
        .expect("the writer slept through a lapsed readers' reservation");
    println!(
        "the writer got in {:?} after the release, behind a reservation nobody took",
        at - released
    );
}

/// `tasks` workers over `clients` read (nine in ten) or write `key` for
/// `run`, entering the ledger (a write weighs [`WRITER`]) for 2 ms each,
/// retrying errors as a caller would. Returns (acquisitions, errors);
/// panics if a worker is stuck.
async fn contend_rw(
    clients: &[LockClient],
    ledger: &Arc<Ledger>,
    key: &str,
    tasks: usize,
    run: Duration,
) -> (u64, u64) {
    let until = Instant::now() + run;
    let workers: Vec<_> = (0..tasks)
        .map(|i| {
            let rw = clients[i % clients.len()].rw_lock(key);
            let (ledger, key) = (Arc::clone(ledger), key.to_owned());
            tokio::spawn(async move {
                let (mut n, mut errors) = (0u64, 0u64);
                let mut rng = support::Lcg(i as u64);
                while Instant::now() < until {
                    let write = rng.below(10) == 0;
                    let opts = LockOptions::default().wait(Duration::from_secs(10));
                    let held = if write {
                        rw.write_with(opts).await.map(Either::Left)
                    } else {
                        rw.read_with(opts).await.map(Either::Right)
                    };
                    let held = match held {
                        Ok(h) => h,
                        Err(Error::Timeout { .. }) => panic!("a worker waited 10 s"),
                        Err(_) => {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    };
                    let weight = if write { WRITER } else { 1 };
                    ledger.enter_counted(&key, weight, WRITER).await;
                    let lost = async {
                        match &held {
                            Either::Left(w) => w.lost().await,
                            Either::Right(g) => g.lost().await,
                        }
                    };
                    tokio::select! {
                        _ = lost => {}
                        _ = tokio::time::sleep(Duration::from_millis(2)) => {}
                    }
                    ledger.leave_counted(&key, weight).await;
                    let released = match held {
                        Either::Left(w) => w.release().await,
                        Either::Right(g) => g.release().await,
                    };
                    if released.is_err() {
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

/// CLIENT KILL of both connections every 300 ms, then two 300 ms SIGSTOPs
/// of the server (shorter than the 1 s lease), during read/write
/// contention: a writer is never inside with anyone, nobody is stuck.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kills_and_server_pauses_break_nothing() {
    let server = Arc::new(RedisServer::start());
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    let clients = [
        support::fault_client(&server.url()).await,
        support::fault_client(&server.url()).await,
    ];
    let run = Duration::from_secs(3);
    let faults = {
        let server = Arc::clone(&server);
        tokio::spawn(async move {
            for i in 0..5 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                let kind = if i % 2 == 0 { "pubsub" } else { "normal" };
                support::client_kill(&admin, &["TYPE", kind]).await;
            }
            for _ in 0..2 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                server.pause();
                tokio::time::sleep(Duration::from_millis(300)).await;
                server.resume();
            }
        })
    };
    let (n, errors) = contend_rw(&clients, &ledger, "faults", 12, run).await;
    faults.await.unwrap();
    let t = ledger.totals(&["faults"]).await;
    println!(
        "rwlock faults: {n} acquisitions, {errors} errors retried, a writer with someone {} times",
        t.over_limit
    );
    assert_eq!(t.over_limit, 0);
    assert!(n > 0);
}

/// A restart without persistence while a write is held: the writer learns
/// the loss, the readers and writers behind it recover, no writer is inside
/// with anyone after it, and fencing tokens keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence() {
    let mut server = RedisServer::start();
    let ledger = Ledger::start().await;
    let clients = [
        support::fault_client(&server.url()).await,
        support::fault_client(&server.url()).await,
    ];
    let old = clients[0].rw_lock("rs").write().await.unwrap();
    let before = old.fencing_token();
    let waiting = {
        let (clients, ledger) = (clients.clone(), Arc::clone(&ledger));
        tokio::spawn(async move {
            contend_rw(&clients, &ledger, "rs", 8, Duration::from_millis(2500)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    tokio::time::timeout(Duration::from_secs(3), old.lost())
        .await
        .expect("the writer never learned its lock was lost");
    let (n, errors) = waiting.await.unwrap();
    let after = clients[1].rw_lock("rs").write().await.unwrap();
    let t = ledger.totals(&["rs"]).await;
    println!("rwlock restart: {n} acquisitions after, {errors} errors retried, a writer with someone {} times", t.over_limit);
    assert!(n > 0);
    assert_eq!(t.over_limit, 0);
    assert!(
        after.fencing_token() > before,
        "fencing tokens went backwards"
    );
    assert!(matches!(old.release().await, Err(Error::LockLost { .. })));
    after.release().await.unwrap();
}

/// Reads and writes cancelled at random points (waiting, in flight,
/// holding), in two clients: once everything settled, a write gets in at
/// once (nothing is held or reserved, nobody queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_at_random_points_leaves_nothing_held() {
    let server = RedisServer::start();
    let clients = [client(&server).await, client(&server).await];
    let mut rng = support::Lcg(0x5eed);
    let mut tasks = Vec::new();
    for i in 0..120 {
        let rw = clients[i % 2].rw_lock("cancel");
        let write = rng.below(5) == 0;
        let give_up = Duration::from_micros(rng.below(20_000));
        let hold = Duration::from_micros(rng.below(5_000));
        tasks.push(tokio::spawn(async move {
            let _ = tokio::time::timeout(give_up, async {
                if write {
                    let w = rw.write().await.unwrap();
                    tokio::time::sleep(hold).await;
                    drop(w);
                } else {
                    let g = rw.read().await.unwrap();
                    tokio::time::sleep(hold).await;
                    drop(g);
                }
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
    // Background releases and lapsing reservations settle within a grace.
    let rw = clients[0].rw_lock("cancel");
    let settled = support::eventually(Duration::from_secs(3), || async {
        match rw.try_write().await.unwrap() {
            Some(w) => {
                w.release().await.unwrap();
                true
            }
            None => false,
        }
    })
    .await;
    assert!(settled, "something stayed held, reserved or queued");
}

/// One retry per local reader batch: when a write ends, the ten readers
/// waiting in each of two clients get in with one acquire call per client
/// (the woken reader takes permits for the others in the same call),
/// counted by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_release_costs_one_call_per_reader_client() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    let w = a.rw_lock("cost").write().await.unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(21));
    let readers: Vec<_> = (0..20)
        .map(|i| {
            let rw = if i % 2 == 0 { &b } else { &c }.rw_lock("cost");
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                let g = rw.read().await.unwrap();
                barrier.wait().await;
                g
            })
        })
        .collect();
    // Every reader has made its arrival try and sleeps.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Script runs, not calls: on this fresh server the release's and the
    // LEAVE's first EVALSHA answers NOSCRIPT before the script is loaded
    // and sent again.
    let before = support::command_runs(&admin).await;
    w.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), barrier.wait())
        .await
        .expect("the readers did not all get in");
    let after = support::command_runs(&admin).await;
    let scripts = support::delta(&before, &after, "evalsha");
    println!("a write's release and 20 readers of two clients getting in: {scripts} script calls");
    // The release, one acquire per reader client (the batch), and each
    // client's queue LEAVE when its readers have returned (if it lands
    // before the count): 3 to 5, and 6 to allow a re-check; one try per
    // reader is over 20 (21-23 measured with the batch size set to 0).
    assert!(scripts <= 6, "{scripts} script calls");
    for r in readers {
        r.await.unwrap().release().await.unwrap();
    }
}

/// `try_read_with` and `try_write_with` take their options (the lease here)
/// and never wait: `None` while the other side holds.
#[tokio::test]
async fn try_read_with_and_try_write_with_never_wait_and_take_their_options() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let rw = c.rw_lock("tw");
    let short = LockOptions::default()
        .lease(Duration::from_secs(7))
        .watchdog(false);
    let w = rw
        .try_write_with(short.clone())
        .await
        .unwrap()
        .expect("free");
    assert_eq!(w.lease(), Duration::from_secs(7));
    assert!(rw.try_read_with(short.clone()).await.unwrap().is_none());
    w.release().await.unwrap();
    let r = rw
        .try_read_with(short.clone())
        .await
        .unwrap()
        .expect("free");
    assert_eq!(r.lease(), Duration::from_secs(7));
    assert!(rw.try_write_with(short).await.unwrap().is_none());
    r.release().await.unwrap();
}
