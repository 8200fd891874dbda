//! Robustness against a real redis-server: settings at their extremes give
//! typed errors, a panic on any path that owns a lock in Redis does not leak
//! it, the background tasks survive a panic, and `shutdown()` leaves every
//! key free at once (also across a process exit).
//!
//! Panics are injected through the one piece of user code every path calls:
//! the `metrics` recorder. A recorder that panics on a chosen metric is
//! installed as this thread's recorder (every test here runs on a
//! current-thread runtime, so relaylock's background tasks record on the
//! same thread).

use relaylock_testkit as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::{Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName};
use metrics::{Metadata, Recorder, SharedString, Unit};
use relaylock::{Error, LockClient, LockOptions, SemaphoreOptions};
use support::{Admin, RedisServer};

/// A metrics recorder that panics once, on the next record of the metric it
/// is armed with.
#[derive(Default)]
struct Tripwire {
    armed: Mutex<Option<&'static str>>,
    tripped: Mutex<u32>,
}

impl Tripwire {
    fn install() -> (&'static Tripwire, metrics::LocalRecorderGuard<'static>) {
        let wire: &'static Tripwire = Box::leak(Box::default());
        let recorder: &'static &'static Tripwire = Box::leak(Box::new(wire));
        (wire, metrics::set_default_local_recorder(recorder))
    }

    fn arm(&self, metric: &'static str) {
        *self.armed.lock().unwrap() = Some(metric);
    }

    fn tripped(&self) -> u32 {
        *self.tripped.lock().unwrap()
    }

    fn check(&self, metric: &str) {
        let trip = {
            let mut armed = self.armed.lock().unwrap();
            let trip = *armed == Some(metric);
            if trip {
                *armed = None;
                *self.tripped.lock().unwrap() += 1;
            }
            trip
        };
        if trip {
            panic!("tripwire: {metric}");
        }
    }
}

struct Trip(&'static Tripwire, String);

impl CounterFn for Trip {
    fn increment(&self, _: u64) {
        self.0.check(&self.1)
    }
    fn absolute(&self, _: u64) {
        self.0.check(&self.1)
    }
}

impl GaugeFn for Trip {
    fn increment(&self, _: f64) {
        self.0.check(&self.1)
    }
    fn decrement(&self, _: f64) {
        self.0.check(&self.1)
    }
    fn set(&self, _: f64) {
        self.0.check(&self.1)
    }
}

impl HistogramFn for Trip {
    fn record(&self, _: f64) {
        self.0.check(&self.1)
    }
}

impl Recorder for &'static Tripwire {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Trip(self, key.name().to_owned())))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Trip(self, key.name().to_owned())))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(Arc::new(Trip(self, key.name().to_owned())))
    }
}

/// How long until another client can take `key`, polled every 10 ms, at
/// most `limit`; `None` if it never could.
async fn until_free(other: &LockClient, key: &str, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(g) = other.try_lock(key).await.unwrap() {
            let at = start.elapsed();
            g.release().await.unwrap();
            return Some(at);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Build with `set` applied to each of `values`: every build must fail with
/// `InvalidArgument` naming `setting`. Then build with `bound` (accepted).
async fn refused_past_bound<T: Copy + std::fmt::Debug>(
    server: &RedisServer,
    setting: &str,
    values: &[T],
    bound: T,
    set: fn(relaylock::LockClientBuilder, T) -> relaylock::LockClientBuilder,
) -> LockClient {
    for &value in values {
        match set(LockClient::builder().url(server.url()), value)
            .build()
            .await
        {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(setting), "{m}"),
            other => panic!("{setting} {value:?}: {other:?}"),
        }
    }
    set(LockClient::builder().url(server.url()), bound)
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn an_unbounded_linger_is_refused_at_build() {
    let server = RedisServer::start();
    let linger = [Duration::MAX, Duration::from_secs(3601)];
    let client = refused_past_bound(
        &server,
        "unsubscribe_linger",
        &linger,
        Duration::from_secs(3600),
        |b, d| b.unsubscribe_linger(d),
    )
    .await;
    // At the bound, a hand-over to a waiter of the same client works.
    let g = client.lock("k").await.unwrap();
    let waiter = support::spawn_waiter(&client, "k");
    support::until_queued(&server.admin().await, &client, "k").await;
    g.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("handed over")
        .unwrap();
}

#[tokio::test]
async fn an_oversized_message_buffer_is_refused_at_build() {
    let server = RedisServer::start();
    let messages = [0, usize::MAX, usize::MAX / 2 + 1, (1 << 20) + 1];
    let client = refused_past_bound(&server, "message_buffer", &messages, 1 << 20, |b, n| {
        b.message_buffer(n)
    })
    .await;
    let g = client.try_lock("k").await.unwrap().expect("free");
    g.release().await.unwrap();
}

/// A lock handed over to a waiter whose task panics right after the grant
/// (here in the wake-up metric) is released, not left held for its lease.
#[tokio::test]
async fn a_panic_after_a_hand_over_leaks_no_lock() {
    let (wire, _recorder) = Tripwire::install();
    let server = RedisServer::start();
    let admin = server.admin().await;
    let client = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;
    for round in 0..3 {
        let g = client.lock("k").await.unwrap();
        let waiter = {
            let client = client.clone();
            tokio::spawn(async move { client.lock("k").await.map(drop) })
        };
        support::until_queued(&admin, &client, "k").await;
        wire.arm(relaylock::metrics::WAKEUPS_TOTAL);
        g.release().await.unwrap();
        let outcome = waiter.await;
        assert!(
            outcome.as_ref().is_err_and(|e| e.is_panic()),
            "round {round}: the waiter did not panic: {outcome:?}"
        );
        let free = until_free(&other, "k", Duration::from_secs(10)).await;
        eprintln!("round {round}: the handed-over lock was free {free:?} after the panic");
        assert!(
            free.is_some_and(|at| at < Duration::from_secs(2)),
            "round {round}: the handed-over lock stayed held ({free:?}; lease 30 s)"
        );
    }
    assert_eq!(wire.tripped(), 3);
}

/// A panic right after an uncontended acquisition (the acquired counter),
/// before the caller got its guard, leaks no lock either.
#[tokio::test]
async fn a_panic_before_the_guard_exists_leaks_no_lock() {
    let (wire, _recorder) = Tripwire::install();
    let server = RedisServer::start();
    let client = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;
    wire.arm(relaylock::metrics::ACQUIRED_TOTAL);
    let task = {
        let client = client.clone();
        tokio::spawn(async move { client.lock("k").await.map(drop) })
    };
    assert!(task.await.is_err_and(|e| e.is_panic()));
    let free = until_free(&other, "k", Duration::from_secs(10)).await;
    assert!(
        free.is_some_and(|at| at < Duration::from_secs(2)),
        "{free:?}"
    );
    // A semaphore's permits too.
    wire.arm(relaylock::metrics::ACQUIRED_TOTAL);
    let task = {
        let client = client.clone();
        tokio::spawn(async move { client.semaphore("s", 1).unwrap().acquire().await.map(drop) })
    };
    assert!(task.await.is_err_and(|e| e.is_panic()));
    let sem = other.semaphore("s", 1).unwrap();
    let freed = support::eventually(Duration::from_secs(2), || async {
        sem.available().await.unwrap() == 1
    })
    .await;
    assert!(freed, "the permit stayed held");
}

/// A guard dropped where recording its hold time panics is still released.
#[tokio::test]
async fn a_guard_whose_drop_panics_is_still_released() {
    let (wire, _recorder) = Tripwire::install();
    let server = RedisServer::start();
    let client = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;
    let task = {
        let client = client.clone();
        tokio::spawn(async move {
            let g = client.lock("k").await.unwrap();
            wire.arm(relaylock::metrics::HELD_SECONDS);
            drop(g);
        })
    };
    assert!(task.await.is_err_and(|e| e.is_panic()));
    assert_eq!(wire.tripped(), 1);
    let free = until_free(&other, "k", Duration::from_secs(10)).await;
    assert!(
        free.is_some_and(|at| at < Duration::from_secs(2)),
        "{free:?}"
    );
}

/// The watchdog keeps renewing after a panic in its task.
#[tokio::test]
async fn the_watchdog_survives_a_panic() {
    let (wire, _recorder) = Tripwire::install();
    let server = RedisServer::start();
    let client = support::client(&server.url()).await;
    let lease = Duration::from_millis(600);
    let g = client
        .lock_with("k", LockOptions::default().lease(lease).watchdog(true))
        .await
        .unwrap();
    wire.arm(relaylock::metrics::RENEWALS_TOTAL);
    tokio::time::sleep(lease * 4).await;
    assert_eq!(wire.tripped(), 1, "no renewal ran");
    assert!(g.is_held(), "the lock was not renewed after the panic");
    assert!(client.is_locked("k").await.unwrap());
    g.release().await.unwrap();
}

/// `shutdown()` releases every hold (live guards, dropped guards, permits,
/// reads, writes), takes the client out of every queue, and refuses every
/// later call on every clone; it is idempotent.
#[tokio::test]
async fn shutdown_releases_everything_and_refuses_later_calls() {
    let server = RedisServer::start();
    let admin = server.admin().await;
    let client = support::client(&server.url()).await;
    let other = support::client(&server.url()).await;

    let live = client.lock("live").await.unwrap();
    let fixed = client
        .lock_with(
            "fixed",
            LockOptions::default().lease(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    drop(client.lock("dropped").await.unwrap());
    let permits = client
        .semaphore("sem", 3)
        .unwrap()
        .acquire_with(SemaphoreOptions::default().permits(2))
        .await
        .unwrap();
    let read = client.rw_lock("rw-r").read().await.unwrap();
    let write = client.rw_lock("rw-w").write().await.unwrap();
    // A waiter of this client, queued behind another client's hold.
    let blocker = other.lock("queued").await.unwrap();
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.lock("queued").await.map(drop) })
    };
    support::until_queued(&admin, &client, "queued").await;
    let lost = live.lost_token();
    // A critical section in progress: ended by the shutdown, not a loss.
    let section = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .with_lock("section", LockOptions::default(), async |_| {
                    tokio::time::sleep(Duration::from_secs(30)).await
                })
                .await
        })
    };
    let started = support::eventually(Duration::from_secs(5), || async {
        other.is_locked("section").await.unwrap()
    });
    assert!(started.await);

    let started = Instant::now();
    client.clone().shutdown().await.unwrap();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");

    // Everything is free at once.
    for key in ["live", "fixed", "dropped"] {
        assert!(!other.is_locked(key).await.unwrap(), "{key} still held");
    }
    assert_eq!(
        other
            .semaphore("sem", 3)
            .unwrap()
            .available()
            .await
            .unwrap(),
        3
    );
    other
        .rw_lock("rw-r")
        .try_write()
        .await
        .unwrap()
        .expect("read freed")
        .release()
        .await
        .unwrap();
    other
        .rw_lock("rw-w")
        .try_read()
        .await
        .unwrap()
        .expect("write freed")
        .release()
        .await
        .unwrap();
    // The waiter got the typed error and the client left the queue.
    let waited = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(waited, Err(Error::Shutdown)), "{waited:?}");
    let ended = tokio::time::timeout(Duration::from_secs(2), section)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ended, Err(Error::Shutdown)), "{ended:?}");
    assert!(!other.is_locked("section").await.unwrap());
    let name = client.redis_key("queued");
    assert!(!support::is_queued(&admin, &name, client.client_id()).await);
    blocker.release().await.unwrap();

    // The guards learn it; every later call fails with a typed error.
    assert!(lost.is_cancelled() && !live.is_held());
    assert!(matches!(live.release().await, Err(Error::Shutdown)));
    assert!(matches!(
        fixed.extend(Duration::from_secs(1)).await,
        Err(Error::Shutdown)
    ));
    drop((fixed, permits, read, write));
    let again = client.clone();
    assert!(matches!(again.lock("x").await, Err(Error::Shutdown)));
    assert!(matches!(again.try_lock("x").await, Err(Error::Shutdown)));
    assert!(matches!(again.is_locked("x").await, Err(Error::Shutdown)));
    assert!(matches!(
        again.semaphore("s", 1).unwrap().acquire().await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(
        again.rw_lock("r").read().await,
        Err(Error::Shutdown)
    ));
    // Idempotent.
    client.shutdown().await.unwrap();
    again.shutdown().await.unwrap();
    assert!(other.try_lock("x").await.unwrap().is_some());
}

/// The child process of `a_process_that_shuts_down_leaves_its_keys_free`:
/// takes a lock, drops its guard, optionally shuts the client down, and
/// exits.
#[tokio::test]
#[ignore = "run by a_process_that_shuts_down_leaves_its_keys_free as a child process"]
async fn child_drops_a_guard_and_exits() {
    let url = std::env::var("RELAYLOCK_CHILD_URL").expect("RELAYLOCK_CHILD_URL");
    let client = LockClient::connect(&url).await.unwrap();
    drop(client.lock("exiting").await.unwrap());
    drop(client.lock("exiting-2").await.unwrap());
    if std::env::var("RELAYLOCK_CHILD_SHUTDOWN").is_ok() {
        client.shutdown().await.unwrap();
    }
    std::process::exit(0);
}

/// How long after the child process exits its keys are free, with and
/// without `shutdown()` before the exit.
#[tokio::test]
async fn a_process_that_shuts_down_leaves_its_keys_free() {
    let server = RedisServer::start();
    let other = support::client(&server.url()).await;
    let run_child = |shutdown: bool| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--ignored", "--exact", "child_drops_a_guard_and_exits"])
            .env("RELAYLOCK_CHILD_URL", server.url())
            .stdout(std::process::Stdio::null());
        if shutdown {
            cmd.env("RELAYLOCK_CHILD_SHUTDOWN", "1");
        }
        let status = cmd.status().unwrap();
        assert!(status.success());
    };
    run_child(true);
    for key in ["exiting", "exiting-2"] {
        let free = until_free(&other, key, Duration::from_secs(5)).await;
        eprintln!("with shutdown: {key} free {free:?} after the child exited");
        assert!(
            free.is_some_and(|at| at < Duration::from_millis(100)),
            "{free:?}"
        );
    }
}

mod settings {
    //! Every builder setting and option through its extremes: zero, the
    //! bounds, one past them, `MAX`. Each case builds a client (or gets
    //! `InvalidArgument` exactly when a setting is out of bounds) and, when
    //! built, takes, hands over and releases locks and permits with it,
    //! all within a time limit: no panic, no hang.

    use super::*;
    use proptest::prelude::*;
    use relaylock::{LockClientBuilder, WaitStrategy, MAX_LEASE};

    const MAX_D: Duration = LockClientBuilder::MAX_DURATION;
    const NS: Duration = Duration::from_nanos(1);

    /// Mostly within bounds (the extremes: the lower bound, the upper
    /// bound), one time in twelve out of them (zero, 1 ns, one past each
    /// bound, `MAX`), so that most cases build a client and exercise it.
    fn durations(bound: Duration, lower: Duration) -> impl Strategy<Value = Duration> {
        prop_oneof![
            11 => prop_oneof![Just(lower), Just(Duration::from_millis(200).max(lower)), Just(bound)],
            1 => prop_oneof![
                Just(Duration::ZERO),
                Just(NS),
                Just(lower.saturating_sub(NS)),
                Just(bound + NS),
                Just(Duration::MAX),
            ],
        ]
    }

    fn counts(bound: usize) -> impl Strategy<Value = usize> {
        prop_oneof![
            11 => prop_oneof![Just(1), Just(bound)],
            1 => prop_oneof![Just(0), Just(bound + 1), Just(usize::MAX)],
        ]
    }

    #[derive(Debug, Clone)]
    struct Settings {
        connect_timeout: Duration,
        command_timeout: Duration,
        linger: Duration,
        message_buffer: usize,
        replica_connections: usize,
        side_retention: Duration,
        default_lease: Duration,
        prefix: String,
        poll: Option<Duration>,
    }

    impl Settings {
        fn valid(&self) -> bool {
            let ms = Duration::from_millis(1);
            let timeout = |d: Duration| d >= ms && d <= MAX_D;
            timeout(self.connect_timeout)
                && timeout(self.command_timeout)
                && self.poll.is_none_or(timeout)
                && self.linger <= MAX_D
                && (1..=LockClientBuilder::MAX_MESSAGE_BUFFER).contains(&self.message_buffer)
                && (1..=64).contains(&self.replica_connections)
                && self.side_retention >= Duration::from_secs(1)
                && self.side_retention <= MAX_LEASE
                && self.default_lease >= ms
                && self.default_lease <= MAX_LEASE
                && !self.prefix.is_empty()
                && self.prefix.len() <= relaylock::MAX_PREFIX_LEN
                && !self.prefix.contains(['{', '}'])
        }

        fn builder(&self, url: String) -> LockClientBuilder {
            LockClient::builder()
                .url(url)
                .connect_timeout(self.connect_timeout)
                .command_timeout(self.command_timeout)
                .unsubscribe_linger(self.linger)
                .message_buffer(self.message_buffer)
                .replica_connections(self.replica_connections)
                .side_retention(self.side_retention)
                .default_lease(self.default_lease)
                .prefix(self.prefix.clone())
                .wait_strategy(self.poll.map_or(WaitStrategy::PubSub, WaitStrategy::Poll))
        }
    }

    fn settings() -> impl Strategy<Value = Settings> {
        let ms = Duration::from_millis(1);
        let max = LockClientBuilder::MAX_MESSAGE_BUFFER;
        (
            durations(MAX_D, ms),
            durations(MAX_D, ms),
            durations(MAX_D, Duration::ZERO),
            counts(max),
            counts(64),
            durations(MAX_LEASE, Duration::from_secs(1)),
            durations(MAX_LEASE, ms),
            prop_oneof![
                11 => prop_oneof![Just("p".to_owned()), Just("p".repeat(relaylock::MAX_PREFIX_LEN))],
                1 => prop_oneof![
                    Just(String::new()),
                    Just("{p}".to_owned()),
                    Just("p".repeat(relaylock::MAX_PREFIX_LEN + 1)),
                ],
            ],
            prop::option::of(durations(MAX_D, ms)),
        )
            .prop_map(
                |(connect, command, linger, buffer, replicas, retention, lease, prefix, poll)| {
                    Settings {
                        connect_timeout: connect,
                        command_timeout: command,
                        linger,
                        message_buffer: buffer,
                        replica_connections: replicas,
                        side_retention: retention,
                        default_lease: lease,
                        prefix,
                        poll,
                    }
                },
            )
    }

    /// What a built client must survive: contention with a hand-over, a
    /// semaphore and a read-write lock with extreme arguments. Errors are
    /// fine (a 1 ms command timeout, a lease of 1 ms); panics and hangs
    /// are not.
    async fn exercise(client: &LockClient, permits: u32, limit: u32) {
        let wait = LockOptions::default().wait(Duration::from_millis(300));
        if let Ok(g) = client.lock_with("s", wait.clone()).await {
            let waiter = {
                let (client, wait) = (client.clone(), wait.clone());
                tokio::spawn(async move { client.lock_with("s", wait).await.map(drop) })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            let _ = g.release().await;
            let _ = waiter.await.expect("the waiter did not panic");
        }
        let r = match client.semaphore("sem", limit) {
            Ok(sem) => {
                sem.acquire_with(
                    SemaphoreOptions::default()
                        .permits(permits)
                        .wait(Duration::from_millis(100)),
                )
                .await
            }
            // A limit of 0 is refused where it is given.
            Err(e) => Err(e),
        };
        match r {
            Ok(p) => {
                assert!(permits >= 1 && permits <= limit);
                let _ = p.release().await;
            }
            Err(Error::InvalidArgument(_)) => {
                assert!(permits == 0 || limit == 0 || permits > limit)
            }
            Err(_) => {}
        }
        let rw = client.rw_lock("rw");
        if let Ok(r) = rw.read_with(wait.clone()).await {
            let _ = r.release().await;
        }
        if let Ok(w) = rw.write_with(wait).await {
            let _ = w.release().await;
        }
        let _ = client.shutdown().await;
    }

    thread_local! {
        /// One server for every case (dropped, and stopped, with the
        /// thread that runs the cases).
        static SERVER: RedisServer = RedisServer::start();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn every_setting_at_its_extremes(
            s in settings(),
            permits in prop_oneof![Just(0u32), Just(1), Just(2), Just(u32::MAX)],
            limit in prop_oneof![Just(0u32), Just(1), Just(3), Just(u32::MAX)],
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            let url = SERVER.with(RedisServer::url);
            runtime.block_on(async {
                let case = async {
                    match s.builder(url).build().await {
                        Ok(client) => {
                            prop_assert!(s.valid(), "built with {s:?}");
                            exercise(&client, permits, limit).await;
                        }
                        Err(Error::InvalidArgument(m)) => prop_assert!(!s.valid(), "{s:?}: {m}"),
                        // A valid setting that cannot connect in time (1 ms).
                        Err(e) => prop_assert!(s.valid(), "{s:?}: {e:?}"),
                    }
                    Ok(())
                };
                tokio::time::timeout(Duration::from_secs(30), case)
                    .await
                    .unwrap_or_else(|_| panic!("hung with {s:?}"))
            })?;
        }
    }
}
