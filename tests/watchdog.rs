//! The lease watchdog, the lost-lock signal, `with_lock` and replica
//! acknowledgement, against real redis-server processes.
//!
//! Its own test binary: it installs a process-wide metrics recorder. Every
//! test uses its own `name` label, so tests running in parallel do not mix
//! their counts.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fred::prelude::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use relaylock::{metrics as names, Error, LockClient, LockOptions};
use support::{command_calls, delta, eventually, Admin, RedisServer};

/// The value of counter `name` with exactly the labels `labels` (plus
/// `primitive="mutex"` unless they name another primitive: every series
/// carries one).
fn counter(name: &str, labels: &[(&str, &str)]) -> u64 {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    let snapshotter = SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("install the test recorder");
        snapshotter
    });
    let mut want: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !want.iter().any(|(k, _)| k == "primitive") {
        want.push(("primitive".into(), "mutex".into()));
    }
    want.sort();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let mut have: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        have.sort();
        if key.name() == name && have == want {
            if let DebugValue::Counter(c) = value {
                return c;
            }
        }
    }
    0
}

fn renewals(name: &str, outcome: &str) -> u64 {
    counter(
        names::RENEWALS_TOTAL,
        &[("name", name), ("outcome", outcome)],
    )
}

fn lost(name: &str) -> u64 {
    counter(names::LOST_TOTAL, &[("name", name)])
}

/// A client whose watchdog locks have `lease` (renewed every `lease / 3`).
async fn client(server: &RedisServer, lease: Duration) -> LockClient {
    // Install the recorder before the first metric is recorded.
    counter("", &[]);
    support::preset(&server.url())
        .default_lease(lease)
        .build()
        .await
        .expect("connect")
}

fn named(name: &'static str) -> LockOptions {
    LockOptions::default().name(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_lock_alive_across_several_leases() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lease = Duration::from_millis(600);
    let lock = client(&server, lease).await;
    let g = lock.lock_with("alive", named("alive")).await.unwrap();
    let key = lock.redis_key("alive");
    let value = format!("{}:{}", g.token(), g.fencing_token());

    // Four leases long, checked every 50 ms.
    let start = Instant::now();
    while start.elapsed() < lease * 4 {
        let head = support::lock_value(&admin, &key).await.map(|v| v.head);
        assert_eq!(
            head.as_deref(),
            Some(value.as_str()),
            "lock lost after {:?}",
            start.elapsed()
        );
        let pttl: i64 = admin.pttl(&key).await.unwrap();
        assert!(pttl > 0, "pttl {pttl}");
        assert!(g.is_held());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let renewed = renewals("alive", "renewed");
    // One renewal per 200 ms over 2.4 s: about 12 (early batching may add some).
    assert!(renewed >= 8, "only {renewed} renewals in four leases");
    assert_eq!(renewals("alive", "error") + renewals("alive", "lost"), 0);
    g.release().await.unwrap();
    assert_eq!(lost("alive"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_lease_is_fixed_unless_watchdog_is_asked_for() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server, Duration::from_secs(30)).await;
    let lease = Duration::from_millis(400);

    let fixed = lock
        .lock_with("fixed", named("fixed").lease(lease))
        .await
        .unwrap();
    let renewed = lock
        .lock_with("renewed", named("renewed").lease(lease).watchdog(true))
        .await
        .unwrap();
    let token = fixed.lost_token();
    assert!(fixed.is_held() && !token.is_cancelled());

    // A fixed lease: lost() fires when the lease runs out (minus the margin),
    // and the key expires: nothing renewed it.
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), fixed.lost())
        .await
        .expect("lost() fires when a fixed lease runs out");
    let fired = start.elapsed();
    assert!(fired < lease, "fired after {fired:?}");
    assert!(token.is_cancelled() && !fixed.is_held());
    assert!(
        eventually(Duration::from_secs(2), || async {
            !support::taken(&admin, &lock.redis_key("fixed")).await
        })
        .await
    );
    assert_eq!(renewals("fixed", "renewed"), 0);
    assert_eq!(lost("fixed"), 1);
    // Counted once, although the release finds it lost too.
    assert!(matches!(fixed.release().await, Err(Error::LockLost { .. })));
    assert_eq!(lost("fixed"), 1);

    // watchdog(true): the custom lease is renewed.
    tokio::time::sleep(lease * 2).await;
    assert!(renewed.is_held());
    let pttl: i64 = admin.pttl(lock.redis_key("renewed")).await.unwrap();
    assert!(pttl > 0 && pttl <= 400, "pttl {pttl}");
    assert!(renewals("renewed", "renewed") >= 3);
    renewed.release().await.unwrap();
}

/// Deleted or overwritten behind the holder's back: `lost()` fires within
/// one renewal period, and the other owner's key is left untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_or_overwritten_key_fires_lost_within_one_period() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lease = Duration::from_millis(900);
    let period = lease / 3;
    let lock = client(&server, lease).await;

    for (name, intrude) in [("deleted", false), ("overwritten", true)] {
        let g = lock.lock_with(name, named(name)).await.unwrap();
        let key = lock.redis_key(name);
        let token = g.lost_token();
        // Let a renewal or two pass first.
        tokio::time::sleep(period + period / 2).await;
        assert!(g.is_held());
        let start = Instant::now();
        if intrude {
            let _: () = admin
                .set(&key, "intruder", None, None, false)
                .await
                .unwrap();
        } else {
            let _: i64 = admin.del(&key).await.unwrap();
        }
        tokio::time::timeout(lease * 3, g.lost())
            .await
            .expect("lost() fires");
        let took = start.elapsed();
        println!("{name}: lost() fired {took:?} after the change (period {period:?})");
        assert!(
            took <= period + Duration::from_millis(150),
            "{name}: lost() fired {took:?} after the change, period {period:?}"
        );
        assert!(token.is_cancelled() && !g.is_held());
        assert_eq!(renewals(name, "lost"), 1);
        assert_eq!(lost(name), 1);
        if intrude {
            // The intruder's key: same value, still no expiry.
            let v: String = admin.get(&key).await.unwrap();
            assert_eq!(v, "intruder");
            assert_eq!(admin.pttl::<i64, _>(&key).await.unwrap(), -1);
        }
        assert!(matches!(g.release().await, Err(Error::LockLost { .. })));
        assert_eq!(lost(name), 1, "a loss is counted once");
        if intrude {
            let v: String = admin.get(&key).await.unwrap();
            assert_eq!(v, "intruder", "release touched another owner's key");
        }
    }
}

/// Redis frozen (SIGSTOP) or shut down while a watched lock is held: the
/// holder learns of the loss before the lease could have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_redis_fires_lost_before_the_lease_ends() {
    for shut_down in [false, true] {
        let mut server = RedisServer::start();
        let lease = Duration::from_millis(1500);
        let lock = client(&server, lease).await;
        let name = if shut_down { "shut_down" } else { "frozen" };
        let g = lock.lock_with(name, named(name)).await.unwrap();
        // A renewal or two get through first.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(renewals(name, "renewed") >= 1);
        // Every renewal that got through was sent before this instant, so the
        // lease ends by `cut + lease` at the latest.
        let cut = Instant::now();
        if shut_down {
            server.kill();
        } else {
            server.pause();
        }
        let fired = tokio::time::timeout(lease * 2, g.lost()).await;
        let took = cut.elapsed();
        if !shut_down {
            server.resume();
        }
        fired.expect("lost() fires while Redis is unreachable");
        println!("{name}: lost() fired {took:?} after Redis became unreachable (lease {lease:?})");
        assert!(
            took < lease,
            "{name}: fired {took:?} after the cut, lease {lease:?}"
        );
        // Not before the last confirmed lease (sent at most one period before
        // the cut) minus the margin could end: 1500 - 500 - 151 ms.
        assert!(
            took >= Duration::from_millis(800),
            "{name}: fired too early, {took:?}"
        );
        assert!(!g.is_held());
        assert_eq!(lost(name), 1);
        drop(g);
    }
}

/// Release and drop stop renewal at once: no renewal call reaches Redis
/// afterwards, none is counted, and the key is not re-created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_drop_stop_renewal() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lease = Duration::from_millis(600);
    let lock = client(&server, lease).await;
    let released = lock.lock_with("released", named("released")).await.unwrap();
    let dropped = lock.lock_with("dropped", named("dropped")).await.unwrap();
    tokio::time::sleep(lease + lease / 2).await;
    assert!(renewals("released", "renewed") >= 3);
    assert!(renewals("dropped", "renewed") >= 3);

    released.release().await.unwrap();
    drop(dropped);
    assert!(
        eventually(Duration::from_secs(2), || async {
            !support::taken(&admin, &lock.redis_key("released")).await
                && !support::taken(&admin, &lock.redis_key("dropped")).await
        })
        .await
    );
    let counted = |n| renewals(n, "renewed") + renewals(n, "lost") + renewals(n, "error");
    let (before_released, before_dropped) = (counted("released"), counted("dropped"));
    let calls = command_calls(&admin).await;
    tokio::time::sleep(lease * 2).await;
    let after = command_calls(&admin).await;
    assert_eq!(
        delta(&calls, &after, "evalsha"),
        0,
        "a script ran after release"
    );
    assert_eq!(counted("released"), before_released);
    assert_eq!(counted("dropped"), before_dropped);
    for key in ["released", "dropped"] {
        assert!(
            !support::taken(&admin, &lock.redis_key(key)).await,
            "a lock was re-created"
        );
    }
    assert_eq!(lost("released") + lost("dropped"), 0);
}

/// 1,000 watched locks in one client: one renewal call per period, not 1,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watched_locks_cost_one_round_trip_per_period() {
    const LOCKS: usize = 1000;
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lease = Duration::from_millis(900);
    let period = lease / 3;
    let lock = client(&server, lease).await;
    let guards = futures::future::try_join_all(
        (0..LOCKS).map(|i| lock.lock_with_owned(format!("many:{i}"), named("many"))),
    )
    .await
    .unwrap();

    let calls = command_calls(&admin).await;
    let usec = command_usec(&admin).await;
    let window = period * 7;
    tokio::time::sleep(window).await;
    let after = command_calls(&admin).await;
    let rounds = delta(&calls, &after, "evalsha");
    let usec = command_usec(&admin).await - usec;
    println!(
        "{LOCKS} locks, {window:?}: {rounds} renewal calls, {} renewals, {} us per call in Redis",
        renewals("many", "renewed"),
        usec / rounds.max(1)
    );
    // Seven periods: seven rounds, plus at most a few while the locks
    // acquired over a spread of time fall into step.
    assert!(
        (5..=10).contains(&rounds),
        "{rounds} renewal calls for {LOCKS} locks over 7 periods"
    );
    assert!(renewals("many", "renewed") >= 5 * LOCKS as u64);
    assert!(guards.iter().all(|g| g.is_held()));
    for g in guards {
        g.release().await.unwrap();
    }
    assert_eq!(lost("many"), 0);
}

/// Total microseconds Redis spent in EVALSHA.
async fn command_usec(admin: &Client) -> u64 {
    let info: String = admin
        .info(Some(fred::types::InfoKind::CommandStats))
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:"))
        .and_then(|f| f.split(',').find_map(|x| x.strip_prefix("usec=")))
        .map_or(0, |n| n.parse().unwrap())
}

trait LockOwned {
    fn lock_with_owned(
        &self,
        key: String,
        options: LockOptions,
    ) -> impl std::future::Future<Output = relaylock::Result<relaylock::LockGuard>>;
}

impl LockOwned for LockClient {
    async fn lock_with_owned(
        &self,
        key: String,
        options: LockOptions,
    ) -> relaylock::Result<relaylock::LockGuard> {
        self.lock_with(&key, options).await
    }
}

/// Drops set a flag, so the test can see the closure's future was dropped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_runs_releases_and_abandons_work_when_the_lock_is_lost() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lease = Duration::from_millis(600);
    let lock = client(&server, lease).await;

    // The normal case, from a spawned task (the future is Send).
    let l = lock.clone();
    let value = tokio::spawn(async move {
        l.with_lock("job", named("with_lock"), async |guard| {
            assert!(guard.is_held());
            tokio::time::sleep(Duration::from_millis(10)).await;
            guard.fencing_token()
        })
        .await
    })
    .await
    .unwrap()
    .unwrap();
    assert!(value > 0);
    assert!(!support::taken(&admin, &lock.redis_key("job")).await);

    // The lock is deleted behind the holder's back: the closure's future is
    // dropped and the call fails with LockLost.
    let dropped = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&dropped);
    let key = lock.redis_key("job");
    let deleter = {
        let admin = admin.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _: i64 = admin.del(key).await.unwrap();
        })
    };
    let start = Instant::now();
    let outcome = lock
        .with_lock("job", named("with_lock"), async |_guard| {
            let _flag = Dropped(flag);
            tokio::time::sleep(Duration::from_secs(60)).await;
        })
        .await;
    deleter.await.unwrap();
    assert!(
        matches!(outcome, Err(Error::LockLost { .. })),
        "{outcome:?}"
    );
    assert!(
        dropped.load(Ordering::SeqCst),
        "the closure's future was not dropped"
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(lost("with_lock"), 1);
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

    // A call dropped while it waits for replicas leaves no lock behind
    // (its lease is 30 s; the key must go long before that).
    let abandoned = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock_with("abandoned", one(2000)).await })
    };
    let key = lock.redis_key("abandoned");
    assert!(
        eventually(Duration::from_secs(2), || async {
            support::taken(&admin, &key).await
        })
        .await,
        "the acquisition never happened"
    );
    abandoned.abort();
    assert!(abandoned.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(2), || async {
            !support::taken(&admin, &key).await
        })
        .await,
        "a call dropped during WAIT left its lock held"
    );

    // Bad settings are typed errors, before anything is sent.
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

/// A shortening `extend` stuck on a connection that fred then replaces
/// (found in review): its command reaches Redis seconds later, after the
/// renewals sent on the new connection, and sets the shorter lease then.
/// The guard must never report the lock held while Redis no longer has it:
/// after an extend that got no clean reply, no confirmation counts more than
/// that extend's lease. Before the fix the record said 12 s from the last
/// renewal while Redis held 2.5 s from the late extend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_copy_of_a_shortening_extend_never_leaves_the_guard_overconfident() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let proxy = support::proxy::Proxy::start(server.port).await;
    counter("", &[]);
    let lock = support::preset(&proxy.url())
        .command_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect("connect");
    let lease = Duration::from_secs(12);
    let g = lock
        .lock_with("k", named("stray").lease(lease).watchdog(true))
        .await
        .unwrap();
    let key = lock.redis_key("k");
    let mine = format!("{}:", g.token());

    // The extend's bytes stay in the proxy for 5 s; it times out after
    // 0.5 s and fred replaces the silent connection.
    proxy.set_mode(support::proxy::Mode::Delay(Duration::from_secs(5)));
    let extending = {
        let g = &g;
        async move { g.extend(Duration::from_millis(2500)).await }
    };
    let (extended, ()) = tokio::join!(extending, async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        proxy.set_mode(support::proxy::Mode::Pass);
    });
    assert!(
        matches!(extended, Err(Error::Redis(_))),
        "the extend should time out: {extended:?}"
    );

    // For 10 s: whenever the guard says held, Redis holds its token.
    let until = Instant::now() + Duration::from_secs(10);
    let mut samples = 0;
    while Instant::now() < until {
        if g.is_held() {
            let value: Option<String> = admin.get(&key).await.unwrap();
            assert!(
                value.as_deref().is_some_and(|v| v.starts_with(&mine)),
                "the guard says held, Redis has {value:?}"
            );
            samples += 1;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(samples > 100, "{samples} samples while held");
    // The watchdog kept the lock through it all.
    assert!(g.is_held());
    g.release().await.unwrap();
}

/// An extend whose reply is lost with its connection: Redis ran it, fred
/// reconnects and sends it again, and the second run's reply arrives. The
/// extend succeeds (RENEW is safe to run twice); past the first lease the
/// lock is still held, the guard never says held while Redis does not hold
/// its token, and the release finds the lock. (A reconnect during the call
/// makes the extend "stray", see `LockGuard::is_held`: with a lease that
/// only grows, that cap changes nothing here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extend_whose_reply_is_lost_succeeds_by_its_replay() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let proxy = support::proxy::Proxy::start(server.port).await;
    counter("", &[]);
    let lock = support::preset(&proxy.url())
        .build()
        .await
        .expect("connect");
    // A fixed lease: no watchdog, so the extend is the only RENEW.
    let g = lock
        .lock_with("k", named("replayed").lease(Duration::from_secs(1)))
        .await
        .unwrap();
    let key = lock.redis_key("k");
    let mine = format!("{}:", g.token());
    let connections = proxy.accepted();

    // Loaded first, so the reply cut is the script's, not a NOSCRIPT.
    let renew: String = admin
        .script_load(relaylock::__scripts::RENEW)
        .await
        .unwrap();
    proxy.cut_instead_of_reply_to(renew.as_bytes());
    let before = support::command_runs(&admin).await;
    g.extend(Duration::from_secs(4))
        .await
        .expect("the replay's reply");
    assert_eq!(proxy.cuts(), 1, "the extend's reply was not cut");
    assert!(proxy.accepted() > connections, "fred did not reconnect");
    let after = support::command_runs(&admin).await;
    assert_eq!(
        delta(&before, &after, "evalsha"),
        2,
        "Redis ran the extend, then its replay"
    );
    let pttl: i64 = admin.pttl(&key).await.unwrap();
    assert!(pttl > 3000, "Redis holds the lock for {pttl} ms");

    // 2.5 s, past the first lease: held, and Redis holds the token.
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        assert!(g.is_held(), "the extended lock must count as held");
        let value: Option<String> = admin.get(&key).await.unwrap();
        assert!(
            value.as_deref().is_some_and(|v| v.starts_with(&mine)),
            "the guard says held, Redis has {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lost("replayed"), 0);
    g.release().await.expect("released, not lost");
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
                    vec![mode.to_owned(), token, lease.to_string()],
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

    let before = command_calls(&admin).await;
    assert_eq!(renew("2", head.clone(), 5_000).await, [1]);
    let after = command_calls(&admin).await;
    assert_eq!(delta(&before, &after, "pexpire"), 1, "it always writes");
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
/// the first primary. (Without the connection watch it returned a guard in
/// 9 of 10 runs.)
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

/// `extend` to a shorter lease: the watchdog plans with the new lease at once
/// (it used to sleep until the old lease's due time while the key expired),
/// and a fixed lease somebody listens to fires at the new end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_to_a_shorter_lease_replans_the_watchdog() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server, Duration::from_secs(30)).await;

    let g = lock.lock_with("shrink", named("shrink")).await.unwrap();
    g.extend(Duration::from_millis(600)).await.unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2000) {
        assert!(
            support::taken(&admin, &lock.redis_key("shrink")).await,
            "expired {:?} after extend",
            start.elapsed()
        );
        assert!(g.is_held());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(renewals("shrink", "renewed") >= 5);
    g.release().await.unwrap();

    let fixed = lock
        .lock_with(
            "fixed_shrink",
            named("fixed_shrink").lease(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let token = fixed.lost_token();
    fixed.extend(Duration::from_millis(300)).await.unwrap();
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(2), token.cancelled())
        .await
        .expect("the signal fires at the shortened lease's end");
    assert!(start.elapsed() < Duration::from_millis(300));
    assert_eq!(lost("fixed_shrink"), 1);
}

/// A lock registered while the watchdog task is planning must still be
/// renewed. Here the task has just fired a fixed lease's signal and nothing
/// else is due for an hour: a registration that compared against the stale
/// plan did not wake it, and the new lock expired unrenewed (1 in ~20 runs
/// before the fix; each run here repeats the scenario 3 times).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_registered_while_the_watchdog_plans_is_renewed() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = client(&server, Duration::from_millis(600)).await;
    for round in 0..3 {
        let f = lock
            .lock_with(
                "f",
                LockOptions::default().lease(Duration::from_millis(100)),
            )
            .await
            .unwrap();
        f.lost().await;
        let g = lock.lock("x").await.unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(1200) {
            assert!(
                support::taken(&admin, &lock.redis_key("x")).await,
                "round {round}: expired after {:?}",
                start.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        g.release().await.unwrap();
        drop(f);
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
