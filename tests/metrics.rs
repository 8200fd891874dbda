//! Metrics are recorded under the documented names, with the documented labels.
//! Its own test binary: it installs a process-wide recorder.

use relaylock_testkit as support;

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use relaylock::{metrics as names, Error, LockClient, LockOptions, SemaphoreOptions};
use support::RedisServer;

/// (name, sorted labels) -> counter value / histogram sample count / gauge value
type Values = HashMap<(String, Vec<(String, String)>), f64>;

fn read(snapshotter: &Snapshotter) -> Values {
    let mut out = HashMap::new();
    for (key, _unit, _desc, value) in snapshotter.snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let v = match (kind, value) {
            (MetricKind::Counter, DebugValue::Counter(c)) => c as f64,
            (MetricKind::Gauge, DebugValue::Gauge(g)) => g.into_inner(),
            (MetricKind::Histogram, DebugValue::Histogram(h)) => h.len() as f64,
            _ => continue,
        };
        out.insert((key.name().to_owned(), labels), v);
    }
    out
}

/// The value of `name` with exactly `labels`, plus `primitive="mutex"`
/// unless `labels` name another primitive (every series carries one).
fn get(m: &Values, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut l: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if !l.iter().any(|(k, _)| k == "primitive") {
        l.push(("primitive".into(), "mutex".into()));
    }
    l.sort();
    m.get(&(name.to_owned(), l)).copied().unwrap_or(0.0)
}

/// Acquisitions, timeouts, hand-overs, losses, semaphore and read-write
/// holds record the documented counters, gauges and histograms, with the
/// documented labels, and no series carries the raw key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("install the test recorder");

    let server = RedisServer::start();
    let lock = LockClient::connect(&server.url()).await.unwrap();
    let mid = take_orders(&lock, &snapshotter).await;
    lose_a_lock_and_take_the_other_primitives(&lock).await;

    let m = read(&snapshotter);
    assert_the_other_primitives_counted(&m);
    assert_the_orders_counted(&m, &mid);
    assert_no_raw_key(&m);
}

/// On the lock "a", named "orders": an acquisition and a release, a
/// timeout after a wait, and a waiter of the same client handed the lock by
/// the release. Returns the values read while that waiter waited.
async fn take_orders(lock: &LockClient, snapshotter: &Snapshotter) -> Values {
    let named = |o: LockOptions| o.name("orders");

    // An acquisition and a release.
    let g = lock
        .lock_with("a", named(LockOptions::default()))
        .await
        .unwrap();
    // A timeout after a wait.
    let r = lock
        .lock_with(
            "a",
            named(LockOptions::default().wait(Duration::from_millis(200))),
        )
        .await;
    assert!(matches!(r, Err(Error::Timeout { .. })));
    // Let the timed-out waiter's clean-up (leaving the queue) finish first:
    // overlapping it, the clean-up may nudge the next waiter into one more try.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A waiter of the same client, handed the lock by the release.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            lock.lock_with("a", LockOptions::default().name("orders"))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mid = read(snapshotter);
    assert_eq!(
        get(&mid, names::WAITERS, &[("name", "orders")]),
        1.0,
        "one task waiting"
    );
    g.release().await.unwrap();
    let g2 = waiter.await.unwrap().unwrap();
    g2.release().await.unwrap();
    mid
}

/// A lost lock (unnamed), a semaphore's permit ("payments"), a read and a
/// write ("doc").
async fn lose_a_lock_and_take_the_other_primitives(lock: &LockClient) {
    // A lost lock: the lease runs out before the release. No name label here.
    let lost = lock
        .lock_with("b", LockOptions::default().lease(Duration::from_millis(50)))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    assert!(matches!(lost.release().await, Err(Error::LockLost { .. })));
    // A semaphore's series carry `primitive="semaphore"`.
    let permit = lock
        .semaphore("pay", 2)
        .unwrap()
        .acquire_with(SemaphoreOptions::default().name("payments"))
        .await
        .unwrap();
    permit.release().await.unwrap();
    // A read-write lock's: `read` and `write`.
    let rw = lock.rw_lock("doc");
    let r = rw
        .read_with(LockOptions::default().name("doc"))
        .await
        .unwrap();
    r.release().await.unwrap();
    let w = rw
        .write_with(LockOptions::default().name("doc"))
        .await
        .unwrap();
    w.release().await.unwrap();
    // A multi-key lock's: `multi`, once per set, with its keys; a set that
    // was not taken (`try_lock_all` finding a key busy) records no hold and
    // no release.
    let opts = || LockOptions::default().name("transfer");
    let set = lock.lock_all_with(["x", "y", "z"], opts()).await.unwrap();
    set.release().await.unwrap();
    let busy = lock
        .lock_with("y2", LockOptions::default().name("busy"))
        .await
        .unwrap();
    let none = lock.try_lock_all_with(["x2", "y2"], opts()).await.unwrap();
    assert!(none.is_none());
    busy.release().await.unwrap();
}

/// The semaphore's and the read-write lock's series carry their primitive.
fn assert_the_other_primitives_counted(m: &Values) {
    for primitive in ["read", "write"] {
        let labels = [("name", "doc"), ("primitive", primitive)];
        assert_eq!(get(m, names::ACQUIRED_TOTAL, &labels), 1.0, "{primitive}");
        assert_eq!(get(m, names::RELEASED_TOTAL, &labels), 1.0, "{primitive}");
    }
    let transfer = [("name", "transfer"), ("primitive", "multi")];
    assert_eq!(get(m, names::ACQUIRED_TOTAL, &transfer), 1.0);
    assert_eq!(get(m, names::RELEASED_TOTAL, &transfer), 1.0);
    assert_eq!(get(m, names::HELD_SECONDS, &transfer), 1.0);
    assert_eq!(get(m, names::ACQUIRE_ATTEMPTS_TOTAL, &transfer), 2.0);
    assert_eq!(get(m, names::MULTI_KEYS, &transfer), 1.0);
    let payments = [("name", "payments"), ("primitive", "semaphore")];
    assert_eq!(get(m, names::ACQUIRED_TOTAL, &payments), 1.0);
    assert_eq!(get(m, names::RELEASED_TOTAL, &payments), 1.0);
    assert_eq!(get(m, names::ACQUIRE_ATTEMPTS_TOTAL, &payments), 1.0);
    assert_eq!(get(m, names::HELD_SECONDS, &payments), 1.0);
}

/// What [`take_orders`] and the lost lock recorded; `mid` is what was read
/// while the waiter waited.
fn assert_the_orders_counted(m: &Values, mid: &Values) {
    let orders = [("name", "orders")];
    assert_eq!(get(m, names::ACQUIRED_TOTAL, &orders), 2.0);
    assert_eq!(get(m, names::ACQUIRED_TOTAL, &[]), 1.0);
    assert_eq!(get(m, names::TIMEOUTS_TOTAL, &orders), 1.0);
    assert_eq!(get(m, names::RELEASED_TOTAL, &orders), 2.0);
    assert_eq!(get(m, names::LOST_TOTAL, &[]), 1.0);
    // The waiter was woken once, holding the lock: the release of its own
    // client gave it the lock directly (no message, no retry).
    assert_eq!(
        get(
            m,
            names::WAKEUPS_TOTAL,
            &[("name", "orders"), ("cause", "handover")]
        ),
        1.0
    );
    assert_eq!(
        get(
            m,
            names::WAKEUPS_TOTAL,
            &[("name", "orders"), ("cause", "message")]
        ),
        0.0
    );
    assert_eq!(get(m, names::WAITERS, &orders), 0.0, "gauge back to zero");
    // attempts: first lock 1, timed-out call 1, the waiter's first try 1 (+ 1 if a
    // probe or the clean-up above nudged it).
    let attempts = get(m, names::ACQUIRE_ATTEMPTS_TOTAL, &orders);
    assert!((3.0..=5.0).contains(&attempts), "attempts {attempts}");
    // The debugging recorder drains histogram samples at each snapshot: add
    // what the mid-test snapshot took.
    let samples =
        |name: &str, labels: &[(&str, &str)]| get(mid, name, labels) + get(m, name, labels);
    assert_eq!(
        samples(
            names::ACQUIRE_WAIT_SECONDS,
            &[("name", "orders"), ("outcome", "acquired")]
        ),
        2.0
    );
    assert_eq!(
        samples(
            names::ACQUIRE_WAIT_SECONDS,
            &[("name", "orders"), ("outcome", "timeout")]
        ),
        1.0
    );
    assert_eq!(samples(names::HELD_SECONDS, &orders), 2.0);
    assert_eq!(samples(names::HELD_SECONDS, &[]), 1.0);
}

/// Every metric is a documented one, and nothing carries the raw key.
fn assert_no_raw_key(m: &Values) {
    for (name, labels) in m.keys() {
        assert!(
            names::ALL.contains(&name.as_str()),
            "undocumented metric {name}"
        );
        for (k, v) in labels {
            assert!(
                k != "key" && v != "a" && v != "b",
                "{name} has a raw key label {k}={v}"
            );
        }
    }
}
