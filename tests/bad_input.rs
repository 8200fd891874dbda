//! Property tests over bad input, against a real redis-server: keys (empty,
//! huge, binary-looking, braces, spaces, unicode), durations (0, under 1 ms,
//! 1 ms, `u64::MAX` ms, `Duration::MAX`), replica settings and URLs. Every
//! call returns a typed error or a correct lock; none panics or hangs.

use relaylock_testkit as support;

use std::time::{Duration, Instant};

use proptest::prelude::*;
use relaylock::{Error, LockClient, LockOptions, MAX_KEY_LEN, MAX_LEASE};
use support::RedisServer;

struct World {
    client: LockClient,
    server: RedisServer,
    runtime: tokio::runtime::Runtime,
}

thread_local! {
    /// One server and one client for every case of a test. Thread-local,
    /// not a static: proptest runs a test's cases on its thread, and the
    /// world (its redis-server with it) is dropped when that thread ends. A
    /// static is never dropped and left its redis-server running.
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
    /// its deadline with `Timeout` (the wait is a deadline: issue 36; zero
    /// is one try and waits for its reply); with_lock runs and releases.
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
/// saying why in words (issue 36: it was fred's `Debug` text, `IO Error:
/// Os { code: 111, kind: ConnectionRefused, ... }`), the cause said once:
/// in the message, not again as its source (a chain-printing reporter
/// printed it twice).
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
