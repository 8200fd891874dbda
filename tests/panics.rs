//! A panic on any path that owns a lock in Redis does not leak it, and the
//! background tasks survive a panic, against a real redis-server.
//!
//! Panics are injected through the one piece of user code every path calls:
//! the `metrics` recorder. A recorder that panics on a chosen metric is
//! installed as this thread's recorder (every test here runs on a
//! current-thread runtime, so relaylock's background tasks record on the
//! same thread).

use relaylock_testkit as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName};
use metrics::{Metadata, Recorder, SharedString, Unit};
use relaylock::LockOptions;
use support::{until_free, Admin, RedisServer};

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
