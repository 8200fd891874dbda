//! Elections under faults, against real redis-server processes: a leader
//! cut off by the proxy learns it before any other candidate is elected
//! (every one of 100 runs), terms rising across every change; a SIGKILLed
//! leader process is replaced within its lease and two round trips; a
//! resignation or a shutdown hands over within a few round trips; and many
//! observers in several clients each see every change, in order. Each test
//! prints what it measured (`--nocapture`).

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use relaylock::LockClient;
use support::proxy::{Mode, Proxy};
use support::{Admin, RedisServer};

const CHILD_ENV: &str = "RELAYLOCK_ELECTION_CHILD";

/// A client with `lease`, 1 s command timeout (the fault scenarios').
async fn client(url: &str, lease: Duration) -> LockClient {
    support::fault_preset(url)
        .default_lease(lease)
        .build()
        .await
        .expect("connect")
}

/// The PING round trip's median over 20 pings.
async fn rtt(admin: &fred::clients::Client) -> Duration {
    use fred::interfaces::ClientLike;
    let mut all = Vec::new();
    for _ in 0..20 {
        let at = Instant::now();
        let _: String = admin.ping(None).await.unwrap();
        all.push(at.elapsed());
    }
    all.sort();
    all[10]
}

/// 100 runs: a leader behind the proxy, a candidate waiting directly; the
/// proxy blackholes the leader. Its `lost()` fires before the candidate is
/// elected, every time, and every term is above the one before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_learns_it_before_anyone_else_is_elected() {
    const RUNS: usize = 100;
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let lease = Duration::from_millis(300);
    let candidate = client(&server.url(), lease).await;
    let mut last_term = 0;
    let mut margins = Vec::new();
    for run in 0..RUNS {
        proxy.set_mode(Mode::Pass);
        let started = Instant::now();
        let leader = client(&proxy.url(), lease).await;
        let l = leader.election("cut").campaign("leader").await.unwrap();
        assert!(l.fencing_token() > last_term, "run {run}: terms rise");
        let next = {
            let c = candidate.clone();
            tokio::spawn(async move {
                let n = c.election("cut").campaign("next").await.unwrap();
                (Instant::now(), n)
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.set_mode(Mode::Blackhole);
        tokio::time::timeout(lease * 4, l.lost())
            .await
            .expect("the cut-off leader learns it");
        let lost_at = Instant::now();
        let (elected_at, n) = tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .expect("the candidate is elected")
            .unwrap();
        assert!(
            lost_at < elected_at,
            "run {run}: a second leader acted before the first knew it lost"
        );
        assert!(
            n.fencing_token() > l.fencing_token(),
            "run {run}: terms rise"
        );
        margins.push(elected_at - lost_at);
        if run == 0 {
            println!(
                "one run: {:?} to connect, campaign, cut and elect",
                started.elapsed()
            );
        }
        last_term = n.fencing_token();
        n.resign().await.unwrap();
        drop(l);
        // The cut-off client is dropped, not shut down: its connections
        // are silent, and its tasks end with it.
        drop(leader);
    }
    margins.sort();
    println!(
        "cut-off leader: lost() before the next election in {RUNS} of {RUNS} runs; margin min {:?}, median {:?} (lease {lease:?})",
        margins[0],
        margins[RUNS / 2]
    );
}

/// A leader process SIGKILLed: the waiting candidate is elected within the
/// lease plus two round trips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_is_replaced_within_its_lease() {
    if let Ok(url) = std::env::var(CHILD_ENV) {
        let c = client(&url, Duration::from_secs(1)).await;
        let l = c.election("k").campaign("child").await.unwrap();
        println!("LEADING {}", l.fencing_token());
        tokio::time::sleep(Duration::from_secs(60)).await;
        return;
    }
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lease = Duration::from_secs(1);
    let (mut child, _) = support::child_holding(
        "a_killed_leader_is_replaced_within_its_lease",
        CHILD_ENV,
        &server.url(),
        "LEADING ",
    )
    .await;
    let c = client(&server.url(), lease).await;
    let next = {
        let c = c.clone();
        tokio::spawn(async move { c.election("k").campaign("next").await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let l = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .unwrap()
        .unwrap();
    let after_kill = killed.elapsed();
    let rtt = rtt(&admin).await;
    println!("leader SIGKILLed: next leader {after_kill:?} after the kill (lease {lease:?}, round trip {rtt:?})");
    assert!(
        after_kill <= lease + 2 * rtt + Duration::from_millis(100),
        "{after_kill:?}"
    );
    l.resign().await.unwrap();
}

/// A leader that resigns, then one that shuts down: each hands over at
/// once (the figures against the round trip are printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resigning_or_shut_down_leader_hands_over_at_once() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let rtt = rtt(&admin).await;
    let lease = Duration::from_secs(1);
    let c = client(&server.url(), lease).await;
    let l = c.election("k").campaign("c").await.unwrap();
    let d = client(&server.url(), lease).await;
    let waiting = {
        let d = d.clone();
        tokio::spawn(async move { d.election("k").campaign("d").await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let at = Instant::now();
    l.resign().await.unwrap();
    let ld = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    let resigned = at.elapsed();
    let e = client(&server.url(), lease).await;
    let waiting = {
        let e = e.clone();
        tokio::spawn(async move { e.election("k").campaign("e").await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let at = Instant::now();
    d.shutdown().await.unwrap();
    let le = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    let shut = at.elapsed();
    let trips = |d: Duration| d.as_secs_f64() / rtt.as_secs_f64();
    println!(
        "leader resigned: next leader {resigned:?} later ({:.1} round trips of {rtt:?}); shut down: {shut:?} ({:.1})",
        trips(resigned),
        trips(shut)
    );
    assert!(ld.fencing_token() < le.fencing_token());
    le.resign().await.unwrap();
    drop(ld);
}

/// 100 observers in 4 clients (25 each): each sees every announced change
/// in order (elected, proclaimed, resigned, the next elected), including
/// after its client's subscriber connection was killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_observers_see_every_change_in_order() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let mut receivers = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..4 {
        let c = client(&server.url(), Duration::from_secs(1)).await;
        for _ in 0..25 {
            receivers.push(c.election("seen").observe());
        }
        clients.push(c);
    }
    let leader = client(&server.url(), Duration::from_secs(1)).await;
    let history = |rx: &tokio::sync::watch::Receiver<Option<relaylock::Leader>>| {
        rx.borrow().as_ref().map(|l| l.value.clone())
    };
    // Each step, then every receiver shows it before the next step.
    let steps: [(&str, Option<&str>); 4] = [
        ("elect a", Some("a")),
        ("proclaim a2", Some("a2")),
        ("resign", None),
        ("elect b", Some("b")),
    ];
    let mut held = None;
    for (i, (step, want)) in steps.iter().enumerate() {
        if i == 3 {
            // The subscriber connections killed before the last change.
            support::client_kill(&admin, &["TYPE", "pubsub"]).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let at = Instant::now();
        match *step {
            "elect a" => held = Some(leader.election("seen").campaign("a").await.unwrap()),
            "proclaim a2" => held.as_ref().unwrap().proclaim("a2").await.unwrap(),
            "resign" => held.take().unwrap().resign().await.unwrap(),
            _ => held = Some(leader.election("seen").campaign("b").await.unwrap()),
        }
        let all = support::eventually(Duration::from_secs(2), || async {
            receivers.iter().all(|rx| history(rx).as_deref() == *want)
        })
        .await;
        assert!(all, "{step}: not every observer saw it");
        println!("{step}: all 100 observers saw it within {:?}", at.elapsed());
    }
    held.unwrap().resign().await.unwrap();
    drop(clients);
}
