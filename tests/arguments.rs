//! Bad input, against a real redis-server: every argument, option and
//! builder setting out of its bounds is a typed error (`InvalidArgument`)
//! before anything is sent, and works at its bounds. Property tests cover
//! keys (empty, huge, binary-looking, braces, spaces, unicode), durations
//! (0, under 1 ms, 1 ms, `u64::MAX` ms, `Duration::MAX`), replica settings,
//! URLs, every builder setting at its extremes, and the fuzz target's entry
//! point: every call returns a typed error or a correct lock; none panics
//! or hangs.

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use fred::interfaces::KeysInterface;
use proptest::prelude::*;
use relaylock::{Error, LockClient, LockOptions, SemaphoreOptions, MAX_KEY_LEN, MAX_LEASE};
use support::{Admin, RedisServer};

async fn client(server: &RedisServer) -> LockClient {
    support::client(&server.url()).await
}

/// Out-of-bounds keys, leases, extends, URLs, prefixes, default leases and
/// poll intervals are `InvalidArgument` errors; keys at the length bound or
/// with braces, spaces or unicode, and a wait too long to be a deadline
/// (no deadline), work.
#[tokio::test]
async fn bad_arguments_are_typed_errors() {
    let server = RedisServer::start();
    let lock = client(&server).await;
    let invalid = |r: &relaylock::Result<_>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(&lock.lock("").await.map(|_| ())));
    assert!(invalid(&lock.try_lock("").await.map(|_| ())));
    assert!(invalid(&lock.is_locked("").await.map(|_| ())));
    let long = "k".repeat(relaylock::MAX_KEY_LEN + 1);
    assert!(invalid(&lock.lock(&long).await.map(|_| ())));
    let max = "k".repeat(relaylock::MAX_KEY_LEN);
    lock.lock(&max).await.unwrap().release().await.unwrap();
    for lease in [
        Duration::ZERO,
        relaylock::MAX_LEASE + Duration::from_secs(1),
        Duration::MAX,
    ] {
        let r = lock
            .lock_with("k", LockOptions::default().lease(lease))
            .await;
        assert!(invalid(&r.map(|_| ())), "lease {lease:?}");
    }
    // A wait too long to be a deadline means "no deadline", not a panic.
    lock.lock_with("k", LockOptions::default().wait(Duration::MAX))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // Keys with braces, spaces, unicode are fine.
    for key in ["{x}", "a b", "ü🔒", "}", "{", "x}:fence"] {
        let g = lock.lock(key).await.unwrap();
        assert_eq!(g.key(), key);
        g.release().await.unwrap();
    }
    let g = lock.lock("k").await.unwrap();
    assert!(invalid(&g.extend(Duration::ZERO).await));
    g.release().await.unwrap();

    for url in ["not a url", "", "redis://", "http://127.0.0.1:6379"] {
        let r = LockClient::connect(url).await.map(|_| ());
        assert!(invalid(&r), "url {url:?} gave {r:?}");
    }
    for prefix in ["", "a{b}", "x}"] {
        let r = LockClient::builder()
            .url(server.url())
            .prefix(prefix)
            .build()
            .await;
        assert!(invalid(&r.map(|_| ())), "prefix {prefix:?}");
    }
    let r = LockClient::builder()
        .url(server.url())
        .default_lease(Duration::ZERO)
        .build()
        .await;
    assert!(invalid(&r.map(|_| ())));
    let r = LockClient::builder()
        .url(server.url())
        .wait_strategy(relaylock::WaitStrategy::Poll(Duration::ZERO))
        .build()
        .await;
    assert!(invalid(&r.map(|_| ())));
}

/// Bad input is a typed error before anything is sent.
#[tokio::test]
async fn bad_input_is_a_typed_error() {
    let server = RedisServer::start();
    let c = client(&server).await;
    let invalid = |r: Result<_, Error>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(invalid(c.semaphore("zero", 0).map(drop)));
    let sem = c.semaphore("s", 2).unwrap();
    assert!(invalid(
        sem.acquire_with(SemaphoreOptions::default().permits(0))
            .await
            .map(drop)
    ));
    assert!(invalid(
        sem.try_acquire_with(SemaphoreOptions::default().permits(3))
            .await
            .map(drop)
    ));
    assert!(invalid(
        c.semaphore("", 2).unwrap().available().await.map(drop)
    ));
    assert!(invalid(
        sem.acquire_with(SemaphoreOptions::default().lease(Duration::ZERO))
            .await
            .map(drop)
    ));
    // A name that holds something else is reported, not misread.
    let admin = server.admin().await;
    let _: () = admin
        .set(
            c.semaphore("foreign", 2).unwrap().redis_key(),
            "not ours",
            None,
            None,
            false,
        )
        .await
        .unwrap();
    let foreign = c.semaphore("foreign", 2).unwrap();
    assert!(matches!(
        foreign.try_acquire().await,
        Err(Error::UnexpectedReply(_))
    ));
    assert!(matches!(
        foreign.available().await,
        Err(Error::UnexpectedReply(_))
    ));
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

/// An unsubscribe linger over an hour is refused at `build()`, naming the
/// setting; at the bound, a hand-over to a waiter of the same client works.
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

/// A message buffer of 0 or over 2^20 messages is refused at `build()`,
/// naming the setting; at the bound, the client takes a lock.
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

struct World {
    client: LockClient,
    server: RedisServer,
    runtime: tokio::runtime::Runtime,
}

thread_local! {
    /// One server and one client for every case of a test. Thread-local,
    /// not a static: proptest runs a test's cases on its thread, and the
    /// world (its redis-server with it) is dropped when that thread ends. A
    /// static is never dropped, and would leave its redis-server running.
    static WORLD: World = {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = RedisServer::start();
        let client = runtime
            .block_on(LockClient::connect(&server.url()))
            .expect("connect");
        World {
            client,
            server,
            runtime,
        }
    };
}

fn with_world<R>(f: impl FnOnce(&World) -> R) -> R {
    WORLD.with(f)
}

fn keys() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "\\PC{1,40}",
        "[{} a-z]{1,12}",
        "[\\x00-\\x1f\\x7f]{1,8}",
        (MAX_KEY_LEN - 2..MAX_KEY_LEN + 3).prop_map(|n| "k".repeat(n)),
        (1usize..4).prop_map(|n| "é".repeat(MAX_KEY_LEN / 2 - 1 + n)),
        (MAX_KEY_LEN + 1..20 * MAX_KEY_LEN).prop_map(|n| "x".repeat(n)),
    ]
}

fn durations() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_millis(1)),
        Just(Duration::from_millis(u64::MAX)),
        Just(Duration::MAX),
        Just(MAX_LEASE),
        Just(MAX_LEASE + Duration::from_nanos(1)),
        (0u64..2_000_000).prop_map(Duration::from_nanos),
        (1u64..600_000).prop_map(Duration::from_millis),
    ]
}

fn key_ok(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN
}

fn lease_ok(lease: Duration) -> bool {
    lease >= Duration::from_millis(1) && lease <= MAX_LEASE
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// try_lock, extend and release with any key and lease.
    #[test]
    fn keys_and_leases(key in keys(), lease in durations(), extend in durations()) {
        with_world(|w| w.runtime.block_on(async {
            let r = w.client.try_lock_with(&key, LockOptions::default().lease(lease)).await;
            if !(key_ok(&key) && lease_ok(lease)) {
                prop_assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}", r);
                return Ok(());
            }
            let g = r.unwrap().expect("a fresh key is free");
            prop_assert!(g.fencing_token() > 0);
            prop_assert_eq!(g.key(), key.as_str());
            let e = g.extend(extend).await;
            if lease_ok(extend) {
                // A lease of a few ms may have run out before the extend.
                let short = lease < Duration::from_secs(1);
                prop_assert!(e.is_ok() || (short && matches!(e, Err(Error::LockLost { .. }))), "{:?}", e);
            } else {
                prop_assert!(matches!(e, Err(Error::InvalidArgument(_))), "{:?}", e);
            }
            // A lease of a few ms may have run out meanwhile: then LockLost.
            let released = g.release().await;
            prop_assert!(
                matches!(released, Ok(()) | Err(Error::LockLost { .. })),
                "{:?}",
                released
            );
            Ok(())
        }))?;
    }

    /// lock_with with any wait limit (zero, huge, `Duration::MAX`) on a free
    /// key acquires at once, or, given less time than a round trip, ends at
    /// its deadline with `Timeout` (the wait is a deadline; zero is one try
    /// and waits for its reply); with_lock runs and releases.
    #[test]
    fn waits(key in keys(), wait in durations()) {
        with_world(|w| w.runtime.block_on(async {
            let started = Instant::now();
            let r = w.client.lock_with(&key, LockOptions::default().wait(wait)).await;
            if !key_ok(&key) {
                prop_assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}", r);
                return Ok(());
            }
            let short = !wait.is_zero() && wait < Duration::from_millis(200);
            match r {
                Ok(g) => g.release().await.unwrap(),
                Err(Error::Timeout { .. }) if short => {
                    prop_assert!(started.elapsed() < wait + Duration::from_millis(100));
                    return Ok(());
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
            prop_assert!(started.elapsed() < Duration::from_secs(5));
            let v = w
                .client
                .with_lock(&key, LockOptions::default().wait(wait), async |g| g.fencing_token())
                .await;
            match v {
                Ok(v) => prop_assert!(v > 0),
                Err(Error::Timeout { .. }) if short => {}
                Err(e) => prop_assert!(false, "{e}"),
            }
            Ok(())
        }))?;
    }

    /// min_replicas with any count and timeout: a typed error either way
    /// (this server has no replica).
    #[test]
    fn replica_settings(replicas in prop_oneof![Just(0u32), Just(1), Just(u32::MAX), 2u32..5], timeout in durations()) {
        with_world(|w| w.runtime.block_on(async {
            // Keep the valid cases short: WAIT then waits its whole timeout.
            let timeout = if timeout > Duration::from_millis(50) && timeout <= Duration::from_secs(3600) {
                Duration::from_millis(50)
            } else {
                timeout
            };
            let opts = LockOptions::default().min_replicas(replicas, timeout);
            let r = w.client.lock_with("replicas", opts).await;
            let valid = replicas >= 1 && timeout >= Duration::from_millis(1) && timeout <= Duration::from_secs(15);
            if valid {
                prop_assert!(
                    matches!(r, Err(Error::NotReplicated { acked: 0, required }) if required == replicas),
                    "{:?}",
                    r
                );
            } else {
                prop_assert!(matches!(r, Err(Error::InvalidArgument(_))), "{:?}", r);
            }
            Ok(())
        }))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any URL: a client or a typed error, within the connect timeout.
    #[test]
    fn urls(url in prop_oneof![
        "\\PC{0,30}",
        "(redis|rediss|valkey|redis-sentinel|redis-cluster|http)://[a-z0-9.:@/%?=]{0,24}",
        (0u32..40).prop_map(|db| format!("redis://127.0.0.1:{}/{db}", with_world(|w| w.server.port))),
        (0u32..70000).prop_map(|p| format!("redis://127.0.0.1:{p}")),
    ]) {
        with_world(|w| w.runtime.block_on(async {
            let started = Instant::now();
            let r = LockClient::builder()
                .url(url.clone())
                .connect_timeout(Duration::from_millis(300))
                .build()
                .await;
            prop_assert!(started.elapsed() < Duration::from_secs(3), "{url}: {:?}", started.elapsed());
            match r {
                Ok(c) => {
                    // Only our own server, with a database that exists.
                    prop_assert!(url.contains(&w.server.port.to_string()), "{url}");
                    c.try_lock("u").await.unwrap().unwrap().release().await.unwrap();
                }
                Err(
                    Error::InvalidArgument(_)
                    | Error::ConnectTimeout { .. }
                    | Error::Connect { .. }
                    | Error::Redis(_),
                ) => {}
                Err(e) => prop_assert!(false, "{url}: unexpected {e:?}"),
            }
            Ok(())
        }))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The fuzz target's entry point (`fuzz/fuzz_targets/inputs.rs`) on the
    /// stable toolchain: random bytes, and structured inputs that reach past
    /// the first checks.
    #[test]
    fn fuzz_entry_point_on_random_bytes(data in prop::collection::vec(any::<u8>(), 0..300)) {
        relaylock::__fuzz::inputs(&data);
    }

    /// The same on structured input: durations, a key, a URL, a prefix and
    /// a message, joined as the fuzz target reads them.
    #[test]
    fn fuzz_entry_point_on_structured_input(
        ms in any::<u64>(),
        nanos in any::<u64>(),
        key in keys(),
        url in "(redis|rediss|redis-sentinel|redis-cluster)://\\PC{0,30}",
        prefix in "\\PC{0,20}",
        message in prop_oneof!["(r|t):\\PC{0,24}", "t:[0-9]{1,25}", "\\PC{0,10}"],
    ) {
        let mut data = ms.to_le_bytes().to_vec();
        data.extend(nanos.to_le_bytes());
        data.extend([key, url, prefix, message].join("\n").into_bytes());
        relaylock::__fuzz::inputs(&data);
    }
}

/// Every seed of the fuzz corpus (`fuzz/seeds/`), replayed.
#[test]
fn fuzz_seeds_replay() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("fuzz/seeds") {
        let data = std::fs::read(entry.unwrap().path()).unwrap();
        relaylock::__fuzz::inputs(&data);
        n += 1;
    }
    assert!(n >= 5, "only {n} seeds in {}", dir.display());
}

/// A server that refuses the connection is a typed error naming it and
/// saying why in words (not fred's `Debug` text, `IO Error: Os { code: 111,
/// kind: ConnectionRefused, ... }`), the cause said once: in the message,
/// not again as its source (a chain-printing reporter would print it
/// twice).
#[test]
fn a_refused_connection_is_a_connect_error_naming_the_server() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A port nobody listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let e = runtime
        .block_on(LockClient::connect(&url))
        .expect_err("nothing listens there");
    match &e {
        Error::Connect { server, error } => {
            assert_eq!(server, &format!("127.0.0.1:{port}"));
            assert_eq!(*error.kind(), relaylock::fred::error::ErrorKind::IO);
        }
        other => panic!("expected Error::Connect, got {other:?}"),
    }
    assert!(std::error::Error::source(&e).is_none(), "the cause twice");
    let shown = e.to_string();
    assert_eq!(
        shown,
        format!("could not connect to Redis at 127.0.0.1:{port}: I/O error: connection refused")
    );
}

mod settings {
    //! Every builder setting and option through its extremes: zero, the
    //! bounds, one past them, `MAX`. Each case builds a client (or gets
    //! `InvalidArgument` exactly when a setting is out of bounds) and, when
    //! built, takes, hands over and releases locks and permits with it,
    //! all within a time limit: no panic, no hang.

    use super::*;
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

        /// Any settings, permits and limit: a client that survives
        /// [`exercise`], or `InvalidArgument` exactly when a setting is out
        /// of bounds; within 30 s.
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
