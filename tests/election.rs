//! Elections against a real redis-server: one leader at a time, FIFO among
//! candidates, terms strictly increasing across every change, the leader's
//! value readable by anyone, a resignation and a shutdown each electing
//! the next candidate, and `with_leadership` running its closure only
//! while leading.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relaylock::{Error, LockOptions, MAX_LEADER_VALUE};
use support::RedisServer;

/// The first candidate leads, with its value readable by another client;
/// the others wait their turn in the order they came, each elected with a
/// higher term once the one before resigns.
#[tokio::test]
async fn candidates_lead_in_turn_with_rising_terms() {
    let server = RedisServer::start();
    let observer = support::client(&server.url()).await;
    let election = observer.election("scheduler");
    assert_eq!(election.leader().await.unwrap(), None, "nobody leads yet");
    let first = support::client(&server.url())
        .await
        .election("scheduler")
        .campaign("pod-1")
        .await
        .unwrap();
    let seen = election.leader().await.unwrap().expect("a leader");
    assert_eq!(seen.value, "pod-1");
    assert_eq!(seen.fencing_token, first.fencing_token());
    assert!(first.is_leader());
    let admin = support::Admin::admin(&server).await;
    let name = observer.redis_key("election:scheduler");
    let mut waiting = Vec::new();
    for i in 2..=4 {
        let c = support::client(&server.url()).await;
        waiting.push(tokio::spawn(async move {
            let l = c
                .election("scheduler")
                .campaign(&format!("pod-{i}"))
                .await
                .unwrap();
            (i, l)
        }));
        // Queued before the next one comes.
        let queued = support::eventually(Duration::from_secs(5), || async {
            support::lock_value(&admin, &name)
                .await
                .is_some_and(|v| v.queue.len() == i - 1)
        })
        .await;
        assert!(queued, "candidate {i} never queued");
    }
    let mut term = first.fencing_token();
    first.resign().await.unwrap();
    for (want, w) in (2..=4).zip(waiting) {
        let (i, l) = tokio::time::timeout(Duration::from_secs(5), w)
            .await
            .expect("the next candidate is elected")
            .unwrap();
        assert_eq!(i, want, "first come, first served");
        assert!(l.fencing_token() > term, "terms rise");
        term = l.fencing_token();
        let seen = election.leader().await.unwrap().expect("a leader");
        assert_eq!(seen.value, format!("pod-{i}"));
        l.proclaim("moved").await.unwrap();
        assert_eq!(election.leader().await.unwrap().unwrap().value, "moved");
        l.resign().await.unwrap();
    }
    assert_eq!(election.leader().await.unwrap(), None);
}

/// `try_campaign` answers at once; a value over the limit is a typed error;
/// a leader whose lock was taken away learns it, and its proclamation is
/// refused.
#[tokio::test]
async fn try_campaign_bad_values_and_a_lost_leadership() {
    let server = RedisServer::start();
    let admin = support::Admin::admin(&server).await;
    let (a, b) = (
        support::client(&server.url()).await,
        support::client(&server.url()).await,
    );
    let big = "x".repeat(MAX_LEADER_VALUE + 1);
    assert!(matches!(
        a.election("e").campaign(&big).await,
        Err(Error::InvalidArgument(_))
    ));
    let l = a
        .election("e")
        .try_campaign("a")
        .await
        .unwrap()
        .expect("free");
    assert!(b.election("e").try_campaign("b").await.unwrap().is_none());
    let _: i64 = fred::interfaces::KeysInterface::del(&admin, a.redis_key("election:e"))
        .await
        .unwrap();
    assert!(matches!(
        l.proclaim("again").await,
        Err(Error::LockLost { .. })
    ));
    let l2 = b
        .election("e")
        .try_campaign("b")
        .await
        .unwrap()
        .expect("free again");
    assert!(l2.fencing_token() > l.fencing_token());
    l2.resign().await.unwrap();
    drop(l);
}

/// A leader that shuts down resigns, and the next candidate is elected at
/// once; `with_leadership` runs only while leading and ends its closure
/// when the leadership is lost.
#[tokio::test]
async fn a_shutdown_elects_the_next_and_with_leadership_ends_on_loss() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(800);
    let client = |url: String| async move {
        support::preset(&url)
            .default_lease(lease)
            .build()
            .await
            .unwrap()
    };
    let a = client(server.url()).await;
    let b = client(server.url()).await;
    let l = a.election("w").campaign("a").await.unwrap();
    let term = l.fencing_token();
    // `a` shuts down: it resigns, and `b` is elected at once.
    let next = {
        let b = b.clone();
        tokio::spawn(async move { b.election("w").campaign("b").await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let shut = Instant::now();
    a.shutdown().await.unwrap();
    let lb = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .unwrap()
        .unwrap();
    assert!(
        shut.elapsed() < lease,
        "elected at once: {:?}",
        shut.elapsed()
    );
    assert!(lb.fencing_token() > term);
    drop(l);
    // with_leadership: the closure runs only while `c` leads, and ends when
    // the leadership is lost (here: the key deleted under it).
    let c = client(server.url()).await;
    let ran = Arc::new(AtomicBool::new(false));
    let work = {
        let (c, ran) = (c.clone(), Arc::clone(&ran));
        tokio::spawn(async move {
            c.election("w")
                .with_leadership("c", LockOptions::default(), async |_| {
                    ran.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(60)).await;
                })
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!ran.load(Ordering::SeqCst), "nothing runs before leading");
    lb.resign().await.unwrap();
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            ran.load(Ordering::SeqCst)
        })
        .await
    );
    let admin = support::Admin::admin(&server).await;
    let _: i64 = fred::interfaces::KeysInterface::del(&admin, c.redis_key("election:w"))
        .await
        .unwrap();
    let ended = tokio::time::timeout(lease * 3, work)
        .await
        .expect("ended on loss");
    assert!(matches!(ended.unwrap(), Err(Error::LockLost { .. })));
}

/// The next value a receiver sees, within `limit`.
async fn next_change(
    rx: &mut tokio::sync::watch::Receiver<Option<relaylock::Leader>>,
    limit: Duration,
) -> Option<relaylock::Leader> {
    tokio::time::timeout(limit, rx.changed())
        .await
        .expect("a change within the limit")
        .expect("the sender lives");
    rx.borrow_and_update().clone()
}

/// Observers hear every change, in order: elected, proclaimed, resigned
/// (nobody leads), the next elected; and one that nobody announces (the
/// leader's key gone, as if its process died and its lease ran out) within
/// the leader's lease; after their subscriber connection is killed they
/// still hear the next change.
#[tokio::test]
async fn observers_hear_every_change_in_order() {
    let server = RedisServer::start();
    let admin = support::Admin::admin(&server).await;
    let observer = support::client(&server.url()).await;
    let election = observer.election("jobs");
    let mut rx = election.observe();
    let mut others = election.observe();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(*rx.borrow_and_update(), None);
    let lease = Duration::from_millis(900);
    let a = support::preset(&server.url())
        .default_lease(lease)
        .build()
        .await
        .unwrap();
    let quick = Duration::from_secs(2);
    let la = a.election("jobs").campaign("a").await.unwrap();
    let term_a = la.fencing_token();
    let seen = next_change(&mut rx, quick).await.expect("elected");
    assert_eq!(
        (seen.value.as_str(), seen.fencing_token),
        ("a", la.fencing_token())
    );
    la.proclaim("a2").await.unwrap();
    assert_eq!(next_change(&mut rx, quick).await.unwrap().value, "a2");
    la.resign().await.unwrap();
    assert_eq!(next_change(&mut rx, quick).await, None, "resigned");
    // The subscriber connection killed: resubscribed, and the next change
    // still heard.
    support::client_kill(&admin, &["TYPE", "pubsub"]).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let lb = a.election("jobs").campaign("b").await.unwrap();
    let seen = loop {
        if let Some(l) = next_change(&mut rx, quick).await {
            break l;
        }
    };
    assert_eq!(seen.value, "b");
    assert!(seen.fencing_token > term_a, "terms rise");
    // A change nobody announces: the key gone under the leader.
    let _: i64 = fred::interfaces::KeysInterface::del(&admin, a.redis_key("election:jobs"))
        .await
        .unwrap();
    let gone = Instant::now();
    assert_eq!(next_change(&mut rx, lease * 2).await, None);
    println!(
        "an unannounced loss seen after {:?} (lease {lease:?})",
        gone.elapsed()
    );
    // Every receiver of the process saw the latest.
    assert_eq!(*others.borrow_and_update(), None);
    drop(lb);
}

/// While nothing changes, the observers of a process cost one read per
/// leader's lease, however many there are.
#[tokio::test]
async fn idle_observers_cost_one_read_per_lease() {
    let server = RedisServer::start();
    let admin = support::Admin::admin(&server).await;
    let leader = support::preset(&server.url())
        .default_lease(Duration::from_secs(6))
        .build()
        .await
        .unwrap();
    let l = leader.election("idle").campaign("x").await.unwrap();
    let observer = support::client(&server.url()).await;
    let receivers: Vec<_> = (0..20)
        .map(|_| observer.election("idle").observe())
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = support::command_runs(&admin).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = support::command_runs(&admin).await;
    let calls = support::delta(&before, &after, "evalsha");
    println!("20 observers, 3 s, leader's lease 6 s: {calls} script calls (renewals included)");
    // The leader renews every 2 s (1 or 2 calls); the observers' reader
    // reads at most once in 3 s of a 6 s lease.
    assert!(calls <= 3, "{calls} calls");
    assert!(receivers
        .iter()
        .all(|r| r.borrow().as_ref().is_some_and(|x| x.value == "x")));
    l.resign().await.unwrap();
}

/// A leader's client that shuts down announces it: its observers see "no
/// leader" at once, not a lease later. An observer's own client that shuts
/// down closes its receivers; `observe` outside a runtime gives a closed
/// receiver, and does not keep a later one from working.
#[tokio::test]
async fn shutdowns_are_heard_and_close_receivers() {
    let server = RedisServer::start();
    let observer = support::client(&server.url()).await;
    let election = observer.election("s");
    let outside = {
        let e = election.clone();
        std::thread::spawn(move || e.observe()).join().unwrap()
    };
    assert!(
        outside.has_changed().is_err(),
        "no reader outside a runtime"
    );
    let mut rx = election.observe();
    let leader = support::client(&server.url()).await;
    let _l = leader.election("s").campaign("x").await.unwrap();
    let seen = next_change(&mut rx, Duration::from_secs(2)).await;
    assert_eq!(seen.map(|l| l.value), Some("x".to_owned()));
    let at = Instant::now();
    leader.shutdown().await.unwrap();
    assert_eq!(next_change(&mut rx, Duration::from_secs(2)).await, None);
    println!("a leader's shutdown heard after {:?}", at.elapsed());
    observer.shutdown().await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(2), rx.changed()).await;
    assert!(
        matches!(closed, Ok(Err(_))),
        "the receiver closes at the shutdown"
    );
}
