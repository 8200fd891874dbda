//! The read-write lock through its public API, against a real
//! redis-server: a writer is never inside with anyone (an independent
//! ledger), readers share, a writer is not starved by a stream of readers,
//! readers queued behind a write get in together, and a crashed holder's
//! hold ends with its lease.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relaylock::{Error, LockClient, LockOptions};
use support::ledger::Ledger;
use support::RedisServer;

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
                    (w.fencing_token(), WRITER, futures::future::Either::Left(w))
                } else {
                    let g = rw.read().await.unwrap();
                    (g.fencing_token(), 1, futures::future::Either::Right(g))
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
                    futures::future::Either::Left(w) => w.release().await.unwrap(),
                    futures::future::Either::Right(g) => g.release().await.unwrap(),
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
    assert!(matches!(short.release().await, Err(Error::LockLost)));
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
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "a_killed_readers_hold_ends_with_its_lease",
            "--exact",
            "--nocapture",
        ])
        .env(CHILD_ENV, server.url())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.starts_with("HELD "))
    })
    .await
    .unwrap()
    .expect("the child took the read lock");
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

/// Found in review: readers of one client that queued before a writer all
/// get in before it when the write ahead of them ends (with a queue entry
/// asking for one permit, one reader per client got in per write).
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

/// Found in review: a readers' reservation that is never taken (its client
/// queued and went away) must not strand the writer queued behind it: the
/// other role hears the reservation too and re-checks after the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_reservation_of_the_other_role_strands_nobody() {
    use fred::prelude::*;
    use support::Admin;
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
        relaylock::scripts::RW_WRITE.to_string(),
        "30000".into(),
        "deadbeefdeadbeef".into(),
        relaylock::scripts::SIDE_RETENTION_MS.to_string(),
        format!("{name}:ch"),
        "PUBLISH".into(),
        relaylock::scripts::HANDOFF_GRACE_MS.to_string(),
    ];
    let refused: Vec<i64> = admin
        .eval(relaylock::scripts::SEM_ACQUIRE, keys, args)
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
