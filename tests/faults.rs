//! Fault injection against real redis-server processes and real client
//! processes: no double holders, no stuck waiters, nothing leaked.
//!
//! Every critical section writes its fencing token to a guarded resource, the
//! *ledger*, which runs on a redis-server of its own that no fault touches.
//! The ledger rejects a token lower than the last one it accepted (a stale
//! write), and records an *overlap* whenever a holder enters while another
//! holder of the same key is still inside: observed independently of the
//! lock. After each scenario:
//!
//! * zero stale writes accepted (the ledger's own check) and, unless the
//!   scenario injects a fault the docs say can break safety, zero overlaps
//!   and zero stale writes attempted;
//! * every worker that waits without a deadline acquired (workers retry
//!   errors, as a caller would), within a bound: no stuck waiter;
//! * no key and no subscribed channel left under the scenario's prefix.
//!
//! The harness (workers, critical sections, the closing checks) is the test
//! kit's [`relaylock_testkit::faults`]. Each test prints what it measured
//! (`--nocapture`); docs/reliability.md quotes those lines.

use relaylock_testkit as support;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::CustomCommand;
use relaylock::{Error, LockClient, LockOptions};
use support::faults::{
    assert_clean, assert_safe, contend, contend_all, critical, key_set, lock_client, proxied,
    repeatedly, Proxied, Stats, LEASE,
};
use support::ledger::Ledger;
use support::proxy::{Mode, Proxy};
use support::{eventually, Admin, RedisServer};

const CHILD_ENV: &str = "RELAYLOCK_FAULT_CHILD";

/// A holder process SIGKILLed while holding: the next waiter gets the lock
/// within lease + 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_is_replaced_within_the_lease() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        hold_as_child(&spec).await;
        return;
    }
    const RUNS: usize = 5;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    let prefix = "killed";
    let lock = lock_client(&server.url(), prefix).await;
    let mut worst = Duration::ZERO;
    let mut all = Vec::new();
    for run in 0..RUNS {
        let spec = format!("{} {prefix} {}", server.url(), ledger.url());
        let (mut child, token) = support::child_holding(
            "a_killed_holder_process_is_replaced_within_the_lease",
            CHILD_ENV,
            &spec,
            "HELD ",
        )
        .await;
        // Waiters in this process, then the holder dies.
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let (lock, ledger) = (lock.clone(), Arc::clone(&ledger));
                tokio::spawn(async move {
                    lock.with_lock("k", LockOptions::default(), async |g| {
                        let at = Instant::now();
                        critical(&ledger, "k", g, Duration::from_millis(5)).await;
                        at
                    })
                    .await
                    .unwrap()
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(200)).await;
        child.kill().unwrap();
        let killed = Instant::now();
        child.wait().unwrap();
        // A dead writer leaves nothing behind in the resource.
        ledger.leave("k", &token).await;
        let mut first = None::<Instant>;
        for w in waiters {
            let at = tokio::time::timeout(Duration::from_secs(10), w)
                .await
                .expect("a waiter is stuck")
                .unwrap();
            first = Some(first.map_or(at, |f| f.min(at)));
        }
        let took = first.unwrap() - killed;
        println!("run {run}: next holder {took:?} after SIGKILL of the holder (lease {LEASE:?})");
        worst = worst.max(took);
        all.push(took);
    }
    println!("holder killed: worst {worst:?} over {RUNS} runs, all {all:?}");
    assert!(worst <= LEASE + Duration::from_secs(1), "{worst:?}");
    assert_safe("killed", ledger.totals(&["k"]).await);
    drop(lock);
    assert_clean(&admin, prefix).await;
}

/// The child role of [`a_killed_holder_process_is_replaced_within_the_lease`]
/// (`spec`: the server's URL, the prefix and the ledger's URL): take the
/// lock, write to the ledger, say so, hang.
async fn hold_as_child(spec: &str) {
    let mut parts = spec.split(' ');
    let (url, prefix, ledger_url) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let lock = lock_client(url, prefix).await;
    let g = lock.lock("k").await.unwrap();
    Ledger::connect(ledger_url)
        .await
        .write("k", g.fencing_token(), g.token(), true)
        .await;
    println!("HELD {}", g.token());
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// `CLIENT KILL TYPE pubsub` and `TYPE normal`, alternately every 200 ms,
/// during contention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_kill_during_contention_breaks_nothing() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    let prefix = "ckill";
    let lock = lock_client(&server.url(), prefix).await;
    let keys = key_set(3);
    let run = Duration::from_secs(4);
    let killer = repeatedly(Duration::from_millis(200), async |kills| {
        let kind = if kills % 2 == 0 { "pubsub" } else { "normal" };
        support::client_kill(&admin, &["TYPE", kind]).await;
    });
    let (stats, kills) = tokio::join!(
        contend(
            &lock,
            &ledger,
            &keys,
            24,
            run,
            Duration::from_millis(2),
            Duration::from_secs(10),
        ),
        killer
    );
    let t = ledger.totals(&keys).await;
    println!("client kill: {kills} kills; {}; ledger {t:?}", stats.line());
    assert_safe("client kill", t);
    drop(lock);
    assert_clean(&admin, prefix).await;
}

/// How a scenario freezes Redis.
#[derive(Clone, Copy, Debug)]
enum Freeze {
    ClientPause,
    DebugSleep,
    Sigstop,
}

async fn freeze(server: &RedisServer, admin: &Client, how: Freeze, d: Duration) {
    match how {
        Freeze::ClientPause => {
            let _: Value = admin
                .custom(
                    CustomCommand::new_static("CLIENT", None, false),
                    vec!["PAUSE".to_owned(), d.as_millis().to_string(), "ALL".into()],
                )
                .await
                .unwrap();
            tokio::time::sleep(d).await;
        }
        Freeze::DebugSleep => {
            let _: Value = admin
                .custom(
                    CustomCommand::new_static("DEBUG", None, false),
                    vec!["SLEEP".to_owned(), format!("{}", d.as_secs_f64())],
                )
                .await
                .unwrap();
        }
        Freeze::Sigstop => {
            server.pause();
            tokio::time::sleep(d).await;
            server.resume();
        }
    }
}

/// Redis frozen shorter and longer than the lease, during contention.
async fn frozen(how: Freeze) {
    let server = RedisServer::try_start(&["--enable-debug-command", "yes"]).unwrap();
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    for (pause, label) in [
        (Duration::from_millis(300), "short"),
        (Duration::from_millis(2500), "long"),
    ] {
        let prefix = format!("{how:?}-{label}").to_lowercase();
        let lock = lock_client(&server.url(), &prefix).await;
        let keys = Arc::new(vec![format!("{prefix}-k")]);
        let run = Duration::from_millis(1500) + pause;
        let freezer = async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let start = Instant::now();
            freeze(&server, &admin, how, pause).await;
            start.elapsed()
        };
        let (stats, froze) = tokio::join!(
            contend(
                &lock,
                &ledger,
                &keys,
                8,
                run,
                Duration::from_millis(20),
                Duration::from_secs(10),
            ),
            freezer
        );
        let t = ledger.totals(&keys).await;
        println!(
            "{how:?} {froze:?} ({label}, lease {LEASE:?}): {}; ledger {t:?}",
            stats.line()
        );
        assert_safe(&prefix, t);
        drop(lock);
        assert_clean(&admin, &prefix).await;
    }
}

/// `CLIENT PAUSE` shorter and longer than the lease ([`frozen`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_pause_shorter_and_longer_than_the_lease() {
    frozen(Freeze::ClientPause).await;
}

/// `DEBUG SLEEP` shorter and longer than the lease ([`frozen`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_sleep_shorter_and_longer_than_the_lease() {
    frozen(Freeze::DebugSleep).await;
}

/// SIGSTOP shorter and longer than the lease ([`frozen`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstop_shorter_and_longer_than_the_lease() {
    frozen(Freeze::Sigstop).await;
}

/// Redis restarted without persistence while locks are held and waiters
/// wait. Every lock disappears, so a new holder can overlap with an old one
/// until the old one's watchdog notices (the docs say a restart breaks
/// mutual exclusion). What must hold: the old holders learn their lock is
/// lost, the waiters recover, fencing tokens keep increasing, and the
/// resource rejects every write of a holder that was overtaken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence() {
    let mut server = RedisServer::start();
    let ledger = Ledger::start().await;
    let prefix = "restart";
    let lock = lock_client(&server.url(), prefix).await;
    let keys = key_set(3);
    let holders: Vec<_> = {
        let mut v = Vec::new();
        for k in keys.iter() {
            v.push(lock.lock(k).await.unwrap());
        }
        v
    };
    let fences_before: Vec<u64> = holders.iter().map(|g| g.fencing_token()).collect();
    for (k, g) in keys.iter().zip(&holders) {
        ledger.write(k, g.fencing_token(), g.token(), true).await;
    }
    let waiting = {
        let (lock, ledger, keys) = (lock.clone(), Arc::clone(&ledger), Arc::clone(&keys));
        tokio::spawn(async move {
            contend(
                &lock,
                &ledger,
                &keys,
                12,
                Duration::from_millis(2500),
                Duration::from_millis(5),
                Duration::from_secs(10),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    let restarted = Instant::now();
    let mut noticed = Duration::ZERO;
    for g in &holders {
        tokio::time::timeout(LEASE * 2, g.lost())
            .await
            .expect("a holder never learned its lock was lost");
        noticed = noticed.max(restarted.elapsed());
    }
    let rejected = overtaken_writes_rejected(&ledger, &keys, &holders).await;
    let stats = waiting.await.unwrap();
    let admin = server.admin().await;
    let after: Vec<u64> = {
        let mut v = Vec::new();
        for k in keys.iter() {
            let g = lock.lock(k).await.unwrap();
            v.push(g.fencing_token());
            g.release().await.unwrap();
        }
        v
    };
    let t = ledger.totals(&keys).await;
    println!(
        "restart: holders learned the loss within {noticed:?}; stale writes of overtaken holders rejected {rejected}/{}; waiters: {}; ledger {t:?}",
        holders.len(),
        stats.line()
    );
    assert_eq!(rejected, holders.len());
    assert!(
        after.iter().zip(&fences_before).all(|(a, b)| a > b),
        "fencing tokens went backwards: {fences_before:?} then {after:?}"
    );
    for g in holders {
        assert!(matches!(g.release().await, Err(Error::LockLost { .. })));
    }
    drop(lock);
    assert_clean(&admin, prefix).await;
}

/// The old `holders` of `keys` write the end of their critical sections
/// once each key has a newer holder (a second write accepted): the
/// resource rejects them. Returns how many writes it rejected.
async fn overtaken_writes_rejected(
    ledger: &Ledger,
    keys: &[String],
    holders: &[relaylock::LockGuard],
) -> usize {
    let mut rejected = 0;
    for (k, g) in keys.iter().zip(holders) {
        assert!(
            eventually(Duration::from_secs(3), || async {
                ledger.totals(std::slice::from_ref(k)).await.accepted > 1
            })
            .await
        );
        if !ledger.write(k, g.fencing_token(), g.token(), false).await {
            rejected += 1;
        }
        ledger.leave(k, g.token()).await;
    }
    rejected
}

/// One client behind a proxy that delays every chunk by 20 ms, one direct:
/// both keep acquiring, safely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_stays_safe() {
    let prefix = "slow";
    let Proxied {
        admin,
        ledger,
        proxy,
        through: slow,
        direct: fast,
        _server,
    } = proxied(prefix).await;
    proxy.set_mode(Mode::Delay(Duration::from_millis(20)));
    let keys = key_set(2);
    let run = Duration::from_secs(3);
    let hold = Duration::from_millis(5);
    let bound = Duration::from_secs(10);
    let (s, f) = tokio::join!(
        contend(&slow, &ledger, &keys, 8, run, hold, bound),
        contend(&fast, &ledger, &keys, 8, run, hold, bound)
    );
    let t = ledger.totals(&keys).await;
    println!(
        "delay 20 ms: slow client {}; fast client {}; ledger {t:?}",
        s.line(),
        f.line()
    );
    assert!(s.acquired.load(Ordering::SeqCst) > 0);
    assert_safe("slow", t);
    drop((slow, fast));
    assert_clean(&admin, prefix).await;
}

/// The proxy resets every connection of one client every 300 ms during
/// contention: it reconnects, re-subscribes, and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_recover() {
    let prefix = "dropped";
    let Proxied {
        admin,
        ledger,
        proxy,
        through: flaky,
        direct: steady,
        _server,
    } = proxied(prefix).await;
    let keys = key_set(2);
    let dropper = repeatedly(Duration::from_millis(300), async |_| {
        proxy.drop_connections()
    });
    let run = Duration::from_secs(4);
    let hold = Duration::from_millis(5);
    let bound = Duration::from_secs(10);
    let (s, f, drops) = tokio::join!(
        contend(&flaky, &ledger, &keys, 8, run, hold, bound),
        contend(&steady, &ledger, &keys, 8, run, hold, bound),
        dropper
    );
    let t = ledger.totals(&keys).await;
    println!(
        "{drops} connection resets: flaky client {}; steady client {}; {} connections accepted; ledger {t:?}",
        s.line(),
        f.line(),
        proxy.accepted()
    );
    assert!(s.acquired.load(Ordering::SeqCst) > 0);
    assert_safe("dropped", t);
    drop((flaky, steady));
    assert_clean(&admin, prefix).await;
}

/// The holder's network goes silent (blackhole): its watchdog cannot renew,
/// so it learns of the loss and its critical section is dropped before the
/// lease runs out in Redis; only then does the waiter get the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_holder_stops_before_the_next_holder_starts() {
    let prefix = "blackhole";
    let Proxied {
        admin,
        ledger,
        proxy,
        through: holder,
        direct: waiter,
        _server,
    } = proxied(prefix).await;
    let (entered, in_cs) = tokio::sync::oneshot::channel();
    let held = {
        let (holder, ledger) = (holder.clone(), Arc::clone(&ledger));
        tokio::spawn(async move {
            let outcome = holder
                .with_lock("k", LockOptions::default(), async |g| {
                    let _ = entered.send(());
                    critical(&ledger, "k", g, Duration::from_secs(30)).await
                })
                .await;
            (outcome, Instant::now())
        })
    };
    in_cs.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let next = {
        let (waiter, ledger) = (waiter.clone(), Arc::clone(&ledger));
        tokio::spawn(async move {
            waiter
                .with_lock("k", LockOptions::default(), async |g| {
                    let at = Instant::now();
                    critical(&ledger, "k", g, Duration::from_millis(5)).await;
                    at
                })
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set_mode(Mode::Blackhole);
    let cut = Instant::now();
    let (outcome, stopped) = held.await.unwrap();
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "{outcome:?}"
    );
    let started = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the waiter is stuck")
        .unwrap();
    println!(
        "blackholed holder: stopped {:?} after the cut, next holder started {:?} after the cut ({:?} after the old one stopped)",
        stopped - cut,
        started - cut,
        started - stopped
    );
    assert!(stopped < started, "the blackholed holder was still running");
    assert!(started - cut <= LEASE + Duration::from_secs(1));
    assert_safe("blackhole", ledger.totals(&["k"]).await);
    proxy.set_mode(Mode::Pass);
    drop((holder, waiter));
    assert_clean(&admin, prefix).await;
}

/// Only one client's subscriber connection goes silent (blackholed, not
/// closed): release messages never arrive and fred sees no error. The
/// subscriber heartbeat detects it within 1.5 command timeouts and
/// reconnects; re-subscribing fails too (the proxy silences every
/// subscriber connection), so that client's waiters poll, one per key every
/// 25 ms. Every wait stays bounded by detection + one re-subscribe timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackholed_subscriber_only_delays_waiters() {
    let prefix = "deaf";
    let Proxied {
        admin,
        ledger,
        proxy,
        through: deaf,
        direct: other,
        _server,
    } = proxied(prefix).await;
    let keys = key_set(1);
    // Subscribe first, then silence the subscriber connection.
    let g = other.lock("k0").await.unwrap();
    let probe = {
        let deaf = deaf.clone();
        tokio::spawn(async move { deaf.lock("k0").await.unwrap().release().await.unwrap() })
    };
    assert!(
        eventually(Duration::from_secs(3), || async {
            support::numsub(&admin, &format!("{prefix}:4:{{k0}}:ch")).await == 2
                || support::numsub(&admin, &format!("{prefix}:4:{{k0}}:ch")).await == 1
        })
        .await
    );
    proxy.set_subscriber_mode(Some(Mode::Blackhole));
    g.release().await.unwrap();
    probe.await.unwrap();
    let run = Duration::from_secs(6);
    let hold = Duration::from_millis(5);
    let bound = Duration::from_secs(10);
    let (d, o) = tokio::join!(
        contend(&deaf, &ledger, &keys, 4, run, hold, bound),
        contend(&other, &ledger, &keys, 4, run, hold, bound)
    );
    let t = ledger.totals(&keys).await;
    println!(
        "deaf subscriber: deaf client {}; other client {}; ledger {t:?}",
        d.line(),
        o.line()
    );
    assert!(d.acquired.load(Ordering::SeqCst) > 0);
    // 1.5 command timeouts to detect, one to fail re-subscribing, one for a
    // waiter whose own first attempt to subscribe hit the silent
    // connection, then polling; 1 s of slack for a loaded machine.
    let command_timeout = Duration::from_secs(1);
    assert!(
        Duration::from_micros(d.max_wait_us.load(Ordering::SeqCst))
            <= command_timeout * 7 / 2 + Duration::from_secs(1),
        "{}",
        d.line()
    );
    assert_safe("deaf", t);
    proxy.set_subscriber_mode(None);
    drop((deaf, other));
    assert_clean(&admin, prefix).await;
}

/// Garbage on a lock's channel (anybody allowed to PUBLISH there can send
/// it) and a lock key written by a stranger with an absurd TTL: no panic, no
/// hang, and the subscriber keeps delivering releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_messages_and_strange_keys_are_harmless() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let prefix = "garbage";
    let lock = lock_client(&server.url(), prefix).await;
    let g = lock.lock("k").await.unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock
                .lock_with("k", LockOptions::default().wait(Duration::from_secs(10)))
                .await
                .unwrap();
            let at = Instant::now();
            g.release().await.unwrap();
            at
        })
    };
    let channel = format!("{prefix}:4:{{k}}:ch");
    assert!(
        eventually(Duration::from_secs(2), || async {
            support::numsub(&admin, &channel).await == 1
        })
        .await
    );
    let long = "x".repeat(10_000);
    for payload in [
        "t:18446744073709551615",
        "t:99999999999999999999999",
        "t:-1",
        "t:",
        "r:",
        "r:someone-else",
        "",
        "\u{0}\u{7f}",
        long.as_str(),
    ] {
        // On the shared channel, and on the client's own (protocol 3).
        let _: i64 = admin.publish(&channel, payload).await.unwrap();
        let own = format!("{channel}:{}", lock.client_id());
        let _: i64 = admin.publish(&own, payload).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    g.release().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is stuck")
        .unwrap();
    let took = acquired - released;
    println!("garbage: the waiter acquired {took:?} after the release");
    // A release message, not the 1 s lease: the subscriber survived.
    assert!(took < Duration::from_millis(500), "{took:?}");

    // A stranger's key under our name, with a TTL of about 285,000 years.
    let stranger = lock.redis_key("s");
    let _: () = admin
        .custom(
            CustomCommand::new_static("SET", None, false),
            vec![
                stranger.clone(),
                "x".into(),
                "PX".into(),
                "9000000000000000".into(),
            ],
        )
        .await
        .unwrap();
    let r = lock
        .lock_with("s", LockOptions::default().wait(Duration::from_millis(300)))
        .await;
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(lock.try_lock("s").await.unwrap().is_none());
    let _: i64 = admin.del(&stranger).await.unwrap();
    drop(lock);
    assert_clean(&admin, prefix).await;
}

/// While the network of one client is silent for several command timeouts,
/// the subscriber heartbeat must not pile up forced reconnects that then run
/// back to back once the network heals (a reconnect storm that also keeps
/// re-subscriptions from confirming).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_silence_causes_no_reconnect_storm() {
    let prefix = "storm-free";
    let Proxied {
        admin,
        proxy,
        through: lock,
        direct: holder,
        _server,
        ..
    } = proxied(prefix).await;
    let g = holder
        .lock_with("k", LockOptions::default().lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock("k").await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    proxy.set_mode(Mode::Blackhole);
    tokio::time::sleep(Duration::from_secs(10)).await;
    proxy.set_mode(Mode::Pass);
    let healed = proxy.accepted();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = proxy.accepted() - healed;
    println!("silence of 10 s: {after} connections opened in the 4 s after it ended");
    // At most a new command and a new subscriber connection (and one spare).
    assert!(after <= 3, "reconnect storm: {after} connections");
    // And the waiter still gets the lock promptly once it is released.
    let released = Instant::now();
    g.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter is stuck")
        .unwrap()
        .unwrap();
    println!(
        "after the silence: acquired {:?} after the release",
        released.elapsed()
    );
    got.release().await.unwrap();
    drop((lock, holder));
    assert_clean(&admin, prefix).await;
}

/// A proxied client whose replies the test cuts, a direct one beside it, and
/// the count of cuts so far.
struct LostReplies {
    _server: RedisServer,
    admin: Client,
    proxy: Proxy,
    lock: relaylock::LockClient,
    other: relaylock::LockClient,
    cuts: u64,
}

impl LostReplies {
    async fn start() -> Self {
        use relaylock::__scripts::{ACQUIRE, RELEASE, SEM_ACQUIRE, SEM_RELEASE};
        let server = RedisServer::start();
        let admin = server.admin().await;
        let proxy = Proxy::start(server.port).await;
        let lock = lock_client(&proxy.url(), "lost-reply").await;
        let other = lock_client(&server.url(), "lost-reply").await;
        // Loaded first, so each cut reply is the script's, not a NOSCRIPT.
        for script in [ACQUIRE, RELEASE, SEM_ACQUIRE, SEM_RELEASE] {
            let _: String = admin.script_load(script).await.unwrap();
        }
        LostReplies {
            _server: server,
            admin,
            proxy,
            lock,
            other,
            cuts: 0,
        }
    }

    /// Runs `call` with the reply of its `script` cut; Redis must have run
    /// the script twice (the call and its replay).
    async fn with_reply_lost<T>(&mut self, script: &str, call: impl Future<Output = T>) -> T {
        let (proxy, admin) = (&self.proxy, &self.admin);
        proxy.cut_instead_of_reply_to(fred::util::sha1_hash(script).as_bytes());
        let before = support::command_runs(admin).await;
        let out = call.await;
        self.cuts += 1;
        assert_eq!(proxy.cuts(), self.cuts, "the reply was not cut");
        let after = support::command_runs(admin).await;
        assert_eq!(
            support::delta(&before, &after, "evalsha"),
            2,
            "run, then replayed"
        );
        out
    }
}

/// Fixed leases: no watchdog, so the scripts of these tests are the only ones.
const LOST_REPLY_LEASE: Duration = Duration::from_secs(10);

/// A reply lost with its connection, for each call that takes or gives
/// back a lock: Redis ran the call, fred reconnects and sends it again. Each
/// replay is recognised as the same call: the acquire returns the one hold
/// Redis has, the release reports no loss, and another client finds the
/// lock free at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_reply_is_lost_is_replayed_as_the_same_call() {
    use relaylock::__scripts::{ACQUIRE, RELEASE};
    let mut t = LostReplies::start().await;
    let (lock, admin) = (t.lock.clone(), t.admin.clone());
    let lease = LockOptions::default().lease(LOST_REPLY_LEASE);
    // The fast path (protocol 4): the acquire script's first SET NX took
    // the free lock, its reply is lost, fred sends the call again, and the
    // copy finds the hold its own (the token alone) and gives it its fence.
    let g = t
        .with_reply_lost(ACQUIRE, lock.lock_with("m", lease.clone()))
        .await
        .expect("the replay's reply");
    assert_redis_has(&admin, &lock.redis_key("m"), &g).await;
    t.with_reply_lost(RELEASE, g.release())
        .await
        .expect("released, not lost");
    assert_free(&t.other, "m").await;

    // The acquire script's other path: a tombstone makes its SET NX fail,
    // and the reply of the take that follows is lost.
    let _: () = admin
        .set(
            lock.redis_key("m"),
            "-5||",
            Some(fred::types::Expiration::PX(60_000)),
            None,
            false,
        )
        .await
        .unwrap();
    let g = t
        .with_reply_lost(ACQUIRE, lock.lock_with("m", lease.clone()))
        .await
        .expect("the replay's reply");
    assert_redis_has(&admin, &lock.redis_key("m"), &g).await;
    g.release().await.unwrap();

    // The common release of a fast-path hold (the value its token alone).
    let g = lock.lock_with("m", lease).await.unwrap();
    let value = support::lock_value(&admin, &lock.redis_key("m")).await;
    assert_eq!(value.map(|v| v.head), Some(g.token().to_owned()));
    t.with_reply_lost(RELEASE, g.release())
        .await
        .expect("released, not lost");
    assert_free(&t.other, "m").await;
}

/// The lock named `name` holds the hold of `g`: its token and its fence.
async fn assert_redis_has(admin: &Client, name: &str, g: &relaylock::LockGuard) {
    let value = support::lock_value(admin, name).await.expect("held");
    assert_eq!(value.token(), Some(g.token()), "the hold Redis has");
    assert_eq!(value.fence(), Some(g.fencing_token()), "the hold Redis has");
}

/// The lock `key` is free for `client`: taken and released at once.
async fn assert_free(client: &relaylock::LockClient, key: &str) {
    let g = client
        .try_lock(key)
        .await
        .unwrap()
        .expect("the lock is free");
    g.release().await.unwrap();
}

/// The same for a semaphore's permits: the acquire and the release whose
/// replies are lost are replayed as the same calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_call_whose_reply_is_lost_is_replayed_as_the_same_call() {
    use relaylock::__scripts::{SEM_ACQUIRE, SEM_RELEASE};
    let mut t = LostReplies::start().await;
    let (lock, other) = (t.lock.clone(), t.other.clone());
    let sem = lock.semaphore("s", 2).unwrap();
    let opts = relaylock::SemaphoreOptions::default().lease(LOST_REPLY_LEASE);
    let p = t
        .with_reply_lost(SEM_ACQUIRE, sem.acquire_with(opts))
        .await
        .expect("the replay's reply");
    let both = relaylock::SemaphoreOptions::default().permits(2);
    let taken = other
        .semaphore("s", 2)
        .unwrap()
        .try_acquire_with(both.clone())
        .await
        .unwrap();
    assert!(taken.is_none(), "one permit is held: two do not fit");
    t.with_reply_lost(SEM_RELEASE, p.release())
        .await
        .expect("released, not lost");
    let p = other
        .semaphore("s", 2)
        .unwrap()
        .try_acquire_with(both)
        .await
        .unwrap();
    p.expect("both permits are free").release().await.unwrap();
}

/// Replies lost with their connections during contention: every 100 ms the
/// proxy drops the next reply to ACQUIRE or RELEASE (in turn) and closes
/// that connection, so fred sends the call again after Redis already ran
/// it. Every replay must be taken for what it is, with the ledger as the
/// judge: no overlap or stale write, no lock reported lost (the leases
/// never lapse here), every worker done in bounded time, nothing left
/// behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_during_contention_are_replayed_safely() {
    use relaylock::__scripts::{ACQUIRE, RELEASE};
    let prefix = "lost-replies";
    let Proxied {
        admin,
        ledger,
        proxy,
        through: cut,
        direct: steady,
        _server,
    } = proxied(prefix).await;
    let keys = key_set(2);
    let scripts = [ACQUIRE, RELEASE].map(fred::util::sha1_hash);
    let cutter = repeatedly(Duration::from_millis(100), async |armed| {
        proxy.cut_instead_of_reply_to(scripts[armed % scripts.len()].as_bytes());
    });
    let run = Duration::from_secs(4);
    let hold = Duration::from_millis(5);
    let bound = Duration::from_secs(10);
    let (c, s, armed) = tokio::join!(
        contend(&cut, &ledger, &keys, 8, run, hold, bound),
        contend(&steady, &ledger, &keys, 8, run, hold, bound),
        cutter
    );
    let t = ledger.totals(&keys).await;
    println!(
        "{} of {armed} armed cuts done: cut client {}; steady client {}; ledger {t:?}",
        proxy.cuts(),
        c.line(),
        s.line()
    );
    assert!(proxy.cuts() >= 15, "only {} replies were cut", proxy.cuts());
    assert!(c.acquired.load(Ordering::SeqCst) > 0);
    assert_safe("lost replies", t);
    assert_eq!(
        c.lost.load(Ordering::SeqCst),
        0,
        "a replay reported as a loss"
    );
    assert_eq!(s.lost.load(Ordering::SeqCst), 0);
    drop((cut, steady));
    assert_clean(&admin, prefix).await;
}

/// Releases whose replies are lost with their connections while two
/// clients trade two keys as fast as they can (no hold): fred sends each
/// release again once it has reconnected, and other holders may have
/// released the key meanwhile. The release ring (32 fences) must still
/// hold the first run's fence, so the replay answers "already released",
/// never a false `LockLost`. Here 32 releases of a key take tens of
/// milliseconds, against a first reconnect attempt within 11 ms; with fred's usual first
/// delay (50 ms plus up to 100 ms of jitter) the ring had turned over: 5 to
/// 14 false losses in 10 cuts, for locks and for permits. Where hand-overs
/// are faster than the reconnect, a false loss remains possible
/// (docs/design.md, "Release").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_replayed_under_load_are_not_false_losses() {
    replayed_under_load(relaylock::__scripts::RELEASE, |lock, key| async move {
        let g = lock.lock(&key).await?;
        g.release().await
    })
    .await;
}

/// [`releases_replayed_under_load_are_not_false_losses`] for a semaphore
/// of one permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_releases_replayed_under_load_are_not_false_losses() {
    replayed_under_load(relaylock::__scripts::SEM_RELEASE, |lock, key| async move {
        let p = lock.semaphore(key, 1).unwrap().acquire().await?;
        p.release().await
    })
    .await;
}

/// 16 workers, half through a proxy and half direct, each running `round`
/// (take and give back) on one of two keys for 2 s, while the proxy
/// drops the reply to `script` 10 times; no round may end in `LockLost`.
async fn replayed_under_load<F, Fut>(script: &str, round: F)
where
    F: Fn(LockClient, String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = relaylock::Result<()>> + Send,
{
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port).await;
    let cut = lock_client(&proxy.url(), "fast-replays").await;
    let direct = lock_client(&server.url(), "fast-replays").await;
    let stats = Arc::new(Stats::default());
    let until = Instant::now() + Duration::from_secs(2);
    let workers: Vec<_> = (0..16)
        .map(|i| {
            let lock = if i % 2 == 0 {
                cut.clone()
            } else {
                direct.clone()
            };
            let key = format!("k{}", (i / 2) % 2);
            let (stats, round) = (Arc::clone(&stats), round.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    // Other errors (a call cut more than fred retries) are
                    // retried; a loss is counted.
                    let counter = match round(lock.clone(), key.clone()).await {
                        Ok(()) => &stats.acquired,
                        Err(Error::LockLost { .. }) => &stats.lost,
                        Err(_) => &stats.errors,
                    };
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let sha = fred::util::sha1_hash(script);
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        proxy.cut_instead_of_reply_to(sha.as_bytes());
    }
    let finished =
        tokio::time::timeout(Duration::from_secs(10), futures::future::join_all(workers));
    assert!(
        finished.await.is_ok(),
        "a worker is stuck: {}",
        stats.line()
    );
    let script_name = if script == relaylock::__scripts::RELEASE {
        "RELEASE"
    } else {
        "SEM_RELEASE"
    };
    println!(
        "{} {script_name} replies cut: {}",
        proxy.cuts(),
        stats.line()
    );
    assert!(proxy.cuts() >= 8, "only {} releases were cut", proxy.cuts());
    assert!(
        stats.acquired.load(Ordering::SeqCst) >= 200,
        "too few rounds to matter: {}",
        stats.line()
    );
    assert_eq!(
        stats.lost.load(Ordering::SeqCst),
        0,
        "a replayed release was reported lost"
    );
}

/// Multi-key holds mixed with single-key ones while `CLIENT KILL TYPE
/// pubsub` and `TYPE normal` alternate every 200 ms (lost release messages,
/// killed command connections): no overlap, no stale write, no stuck
/// waiter, nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_holds_under_client_kill() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let ledger = Ledger::start().await;
    let prefix = "mkill";
    let lock = lock_client(&server.url(), prefix).await;
    let keys = key_set(6);
    let killer = repeatedly(Duration::from_millis(200), async |kills| {
        let kind = if kills % 2 == 0 { "pubsub" } else { "normal" };
        support::client_kill(&admin, &["TYPE", kind]).await;
    });
    let (stats, kills) = tokio::join!(
        contend_all(
            &lock,
            &ledger,
            &keys,
            16,
            Duration::from_secs(4),
            Duration::from_millis(2),
            Duration::from_secs(10),
        ),
        killer
    );
    let t = ledger.totals(&keys).await;
    println!(
        "multi-key, client kill: {kills} kills; {}; ledger {t:?}",
        stats.line()
    );
    assert_safe("multi-key client kill", t);
    drop(lock);
    assert_clean(&admin, prefix).await;
}

/// A restart without persistence while multi-key holds contend: every
/// holder learns its keys are gone, no waiter is stuck, and every key's
/// fencing token afterwards is above the one before the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_holds_across_a_restart() {
    let mut server = RedisServer::start();
    let ledger = Ledger::start().await;
    let prefix = "mrestart";
    let lock = lock_client(&server.url(), prefix).await;
    let keys = key_set(4);
    let held = lock.lock_all(keys.iter()).await.unwrap();
    let before: Vec<u64> = held.fencing_tokens().map(|(_, f)| f).collect();
    let waiting = {
        let (lock, ledger, keys) = (lock.clone(), Arc::clone(&ledger), Arc::clone(&keys));
        tokio::spawn(async move {
            contend_all(
                &lock,
                &ledger,
                &keys,
                12,
                Duration::from_millis(2500),
                Duration::from_millis(5),
                Duration::from_secs(10),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    let restarted = Instant::now();
    tokio::time::timeout(LEASE * 2, held.lost())
        .await
        .expect("the holder never learned its keys were lost");
    let noticed = restarted.elapsed();
    let stats = waiting.await.unwrap();
    let after = lock.lock_all(keys.iter()).await.unwrap();
    let later: Vec<u64> = after.fencing_tokens().map(|(_, f)| f).collect();
    println!(
        "multi-key restart: the holder learned the loss within {noticed:?}; waiters: {}",
        stats.line()
    );
    assert!(
        later.iter().zip(&before).all(|(a, b)| a > b),
        "fencing tokens went backwards: {before:?} then {later:?}"
    );
    after.release().await.unwrap();
    assert!(matches!(held.release().await, Err(Error::LockLost { .. })));
    let admin = server.admin().await;
    drop(lock);
    assert_clean(&admin, prefix).await;
}

/// A process holding a multi-key lock is SIGKILLed: the waiting multi-key
/// and single-key calls of another process get every key within the lease
/// and a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_multi_key_holder_is_replaced_within_the_lease() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.split(' ');
        let (url, prefix) = (parts.next().unwrap(), parts.next().unwrap());
        let lock = lock_client(url, prefix).await;
        let g = lock.lock_all(["m1", "m2", "m3"]).await.unwrap();
        println!("HELD {}", g.token());
        tokio::time::sleep(Duration::from_secs(60)).await;
        return;
    }
    let server = RedisServer::start();
    let admin = server.admin().await;
    let prefix = "mkilled";
    let lock = lock_client(&server.url(), prefix).await;
    let spec = format!("{} {prefix}", server.url());
    let (mut child, _) = support::child_holding(
        "a_killed_multi_key_holder_is_replaced_within_the_lease",
        CHILD_ENV,
        &spec,
        "HELD ",
    )
    .await;
    let sets: [&'static [&str]; 4] = [&["m3", "m1"], &["m2"], &["m1", "m2", "m3"], &["m3"]];
    let waiters: Vec<_> = sets
        .into_iter()
        .map(|keys| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let g = lock.lock_all(keys.iter()).await.unwrap();
                let at = Instant::now();
                g.release().await.unwrap();
                at
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let mut worst = Duration::ZERO;
    for w in waiters {
        let at = tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("a waiter is stuck")
            .unwrap();
        worst = worst.max(at.saturating_duration_since(killed));
    }
    println!(
        "multi-key holder killed: every waiter served {worst:?} after SIGKILL (lease {LEASE:?})"
    );
    assert!(worst <= LEASE + Duration::from_secs(1), "{worst:?}");
    drop(lock);
    assert_clean(&admin, prefix).await;
}

/// The multi-key calls' replies lost with their connection: fred sends
/// each again, and the replay is recognised key by key: the acquire
/// returns the holds Redis has (their fences), the release reports no
/// loss, and another client finds every key free at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_calls_whose_replies_are_lost_are_replayed() {
    use relaylock::__scripts::{ACQUIRE_ALL, RELEASE_ALL};
    let mut t = LostReplies::start().await;
    let _: String = t.admin.script_load(ACQUIRE_ALL).await.unwrap();
    let _: String = t.admin.script_load(RELEASE_ALL).await.unwrap();
    let (lock, admin) = (t.lock.clone(), t.admin.clone());
    let lease = LockOptions::default().lease(LOST_REPLY_LEASE);
    let g = t
        .with_reply_lost(ACQUIRE_ALL, lock.lock_all_with(["x", "y", "z"], lease))
        .await
        .expect("the replay's reply");
    for (key, fence) in g.fencing_tokens() {
        let value = support::lock_value(&admin, &lock.redis_key(key))
            .await
            .expect("held");
        assert_eq!(value.token(), Some(g.token()), "{key}");
        assert_eq!(value.fence(), Some(fence), "{key}: the fence Redis has");
    }
    t.with_reply_lost(RELEASE_ALL, g.release())
        .await
        .expect("released, not lost");
    for key in ["x", "y", "z"] {
        assert_free(&t.other, key).await;
    }
}
