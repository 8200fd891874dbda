//! Leases, against real redis-server processes: a lock kept past its first
//! lease by `extend` or by the watchdog's renewals (one round trip per
//! period for a thousand locks, stopped by release and drop), a fixed lease
//! that runs out, the lost-lock signal (`lost()`, `with_lock`) when a lock
//! is deleted, overwritten, expired or unreachable, and a guard that never
//! says held while Redis no longer holds its token (cancelled, overlapping,
//! replayed and late extends).
//!
//! Its own test binary: it installs a process-wide metrics recorder
//! ([`relaylock_testkit::counters`]). Every test uses its own `name` label,
//! so tests running in parallel do not mix their counts.

use relaylock_testkit as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::*;
use relaylock::{Error, LockClient, LockOptions};
use support::counters::{counter, lost, named, renewals};
use support::{command_calls, delta, eventually, poll_once_and_drop, Admin, RedisServer};

/// A client whose watchdog locks have `lease` (renewed every `lease / 3`).
async fn client(server: &RedisServer, lease: Duration) -> LockClient {
    support::counters::watched_client(&server.url(), lease).await
}

/// The watchdog keeps a lock across four leases: Redis holds its token and
/// a live TTL throughout, about one renewal per third of a lease, no error
/// and no loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_keeps_a_lock_alive_across_several_leases() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lease = Duration::from_millis(600);
    let lock = client(&server, lease).await;
    let g = lock.lock_with("alive", named("alive")).await.unwrap();
    let key = lock.redis_key("alive");
    // Four leases long, checked every 50 ms.
    let start = Instant::now();
    while start.elapsed() < lease * 4 {
        let value = support::lock_value(&admin, &key).await;
        assert!(
            value
                .as_ref()
                .is_some_and(|v| v.held_by(g.token(), g.fencing_token())),
            "lock lost after {:?}: {value:?}",
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

/// An explicit lease is fixed: `lost()` fires before it runs out, the key
/// expires, and the loss is counted once; with `watchdog(true)` the same
/// lease is renewed.
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

/// `with_lock` runs its closure under the lock and releases it; when the
/// lock is deleted behind it, the closure's future is dropped and the call
/// fails with `LockLost` within 2 s (the closure would run 60 s).
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

/// `extend` to a shorter lease: the watchdog plans with the new lease at once
/// (not at the old lease's due time, by which the key would have expired),
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
/// else is due for an hour: a registration compared against that stale
/// plan would not wake it, and the new lock would expire unrenewed. The
/// race is narrow, so each run repeats the scenario 3 times.
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

/// A waiter wakes at the holder's remaining lease when nobody releases.
#[tokio::test]
async fn waiter_takes_over_an_expired_lease() {
    let server = RedisServer::start();
    let lock = support::client(&server.url()).await;
    let dead = lock
        .lock_with(
            "k",
            LockOptions::default().lease(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    std::mem::forget(dead); // a holder that died without releasing
    let start = Instant::now();
    let g = lock
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(5)))
        .await
        .unwrap();
    let waited = start.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "took {waited:?} to take over a 300 ms lease"
    );
    g.release().await.unwrap();
}

/// A lock whose lease ran out and that another client took: `extend` and
/// `release` report `LockLost` and leave the new owner's value and lease as
/// they were; the new owner's fence is higher.
#[tokio::test]
async fn expired_lock_reports_lost_and_never_touches_the_new_owner() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let a = support::client(&server.url()).await;
    let b = support::client(&server.url()).await;
    let old = a
        .lock_with(
            "k",
            LockOptions::default().lease(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    let new = b.lock("k").await.unwrap();
    assert!(new.fencing_token() > old.fencing_token());
    let new_value: String = admin.get(a.redis_key("k")).await.unwrap();
    let new_ttl: i64 = admin.pttl(a.redis_key("k")).await.unwrap();

    assert!(matches!(
        old.extend(Duration::from_secs(60)).await,
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(old.release().await, Err(Error::LockLost { .. })));

    let value: String = admin.get(a.redis_key("k")).await.unwrap();
    assert_eq!(value, new_value, "the new owner's key was modified");
    assert!(value.starts_with(new.token()));
    let ttl: i64 = admin.pttl(a.redis_key("k")).await.unwrap();
    assert!(
        ttl <= new_ttl && ttl > 20_000,
        "the new owner's lease was changed: {ttl}"
    );
    new.release().await.unwrap();
}

/// `extend` sets a new lease: a 300 ms lease extended to 5 s is still held
/// 500 ms later.
#[tokio::test]
async fn extend_keeps_the_lock_past_its_first_lease() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let lock = support::client(&server.url()).await;
    let g = lock
        .lock_with(
            "k",
            LockOptions::default().lease(Duration::from_millis(300)),
        )
        .await
        .unwrap();
    g.extend(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ttl: i64 = admin.pttl(lock.redis_key("k")).await.unwrap();
    assert!(ttl > 3_000, "extend did not take: pttl {ttl}");
    assert!(lock.try_lock("k").await.unwrap().is_none());
    g.release().await.unwrap();
}

fn lease(d: Duration) -> LockOptions {
    LockOptions::default().lease(d)
}

/// A shortening `extend` whose future is dropped after it was sent still
/// shortens the lease in Redis: the guard must not believe in the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shortening_extend_never_overstates_the_lease() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let owner = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;
    let key = owner.redis_key("k");

    // A fixed 30 s lease, shortened to 200 ms by a call nobody waits for.
    let g = owner
        .lock_with("k", lease(Duration::from_secs(30)))
        .await
        .unwrap();
    poll_once_and_drop(g.extend(Duration::from_millis(200))).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let taken = other
        .lock_with("k", LockOptions::default().wait(Duration::from_secs(1)))
        .await
        .expect("the shortened lease ran out");
    assert!(!g.is_held(), "is_held() after the shortened lease ran out");
    tokio::time::timeout(Duration::from_millis(200), g.lost())
        .await
        .expect("lost() fires once the shortened lease ran out");
    taken.release().await.unwrap();
    drop(g);

    // A watched lock: renewals may lengthen it again, but whenever the
    // guard says held, Redis holds its token.
    let g = owner.lock("k").await.unwrap();
    let token = g.token().to_owned();
    poll_once_and_drop(g.extend(Duration::from_millis(200))).await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(1500) {
        let held = g.is_held();
        let value: Option<String> = admin.get(&key).await.unwrap();
        if held {
            let ours = value.is_some_and(|v| support::holds_token(&v, &token));
            assert!(ours, "is_held() while Redis no longer holds our token");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(g);
}

/// Two overlapping `extend`s of one guard while the script cache is empty:
/// the older, shorter one is re-sent after its reload and runs LAST in
/// Redis. The lease record must not keep the newer, longer lease: another
/// client never takes the lock while `is_held()` is true.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_extends_never_overstate_the_lease() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let owner = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;
    let key = owner.redis_key("k");
    // The race needs the first extend's EVALSHA answered NOSCRIPT while the
    // second runs; on a loaded machine a round can miss it, so several
    // rounds, and the invariant is checked in every one.
    let mut raced = 0;
    for round in 0..4 {
        let guard = owner
            .lock_with("k", LockOptions::default().lease(Duration::from_secs(3)))
            .await
            .unwrap();
        support::script_flush(&admin).await;
        let mut short = Box::pin(guard.extend(Duration::from_millis(500)));
        // Sent: EVALSHA, which will answer NOSCRIPT.
        let pending = futures::poll!(short.as_mut()).is_pending();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // A newer extend, to 20 s, runs to completion (it reloads the script).
        guard.extend(Duration::from_secs(20)).await.unwrap();
        let pttl_after_long: i64 = admin.pttl(&key).await.unwrap();
        // The older one now reloads and sends its EVALSHA again: it runs last.
        short.await.unwrap();
        let pttl: i64 = admin.pttl(&key).await.unwrap();
        if pending && pttl < 1000 {
            raced += 1;
        }
        println!(
            "round {round}: PTTL after the 20 s extend: {pttl_after_long} ms; after the older 500 ms one completed: {pttl} ms"
        );
        tokio::time::sleep(Duration::from_millis(700)).await;
        let taken = other.try_lock("k").await.unwrap();
        println!(
            "round {round}: 700 ms later another client took it = {}, the first guard's is_held() = {}",
            taken.is_some(),
            guard.is_held()
        );
        assert!(
            !(taken.is_some() && guard.is_held()),
            "round {round}: the other client holds the lock while the first guard's is_held() is still true"
        );
        if let Some(t) = taken {
            t.release().await.unwrap();
        }
        drop(guard);
        let free = eventually(Duration::from_secs(5), || async {
            !support::taken(&admin, &key).await
        })
        .await;
        assert!(free);
    }
    assert!(
        raced > 0,
        "the older extend never ran last: the race was not exercised"
    );
}

/// A shortening `extend` stuck on a connection that fred then replaces: its
/// command reaches Redis seconds later, after the renewals sent on the new
/// connection, and sets the shorter lease then. The guard must never report
/// the lock held while Redis no longer has it: after an extend that got no
/// clean reply, no confirmation counts more than that extend's lease (here
/// 2.5 s, against the 12 s a later renewal asked for).
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
    let mine = g.token().to_owned();

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
                value
                    .as_deref()
                    .is_some_and(|v| support::holds_token(v, &mine)),
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
    let mine = g.token().to_owned();
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
            value
                .as_deref()
                .is_some_and(|v| support::holds_token(v, &mine)),
            "the guard says held, Redis has {value:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(lost("replayed"), 0);
    g.release().await.expect("released, not lost");
}
