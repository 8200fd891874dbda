//! Metric names, their units, and the helpers that record them.
//!
//! relaylock records through the [`metrics`] facade: install any recorder
//! (Prometheus, StatsD, ...) and these series appear. Nothing is recorded
//! with a raw lock key as a label, because keys are unbounded; pass a bounded
//! name with [`LockOptions::name`](crate::LockOptions::name) to get a `name`
//! label.
//!
//! | name | kind | unit | labels |
//! |------|------|------|--------|
//! | `relaylock_acquire_wait_seconds` | histogram | seconds from the call to the outcome | `outcome` = `acquired`, `timeout`, `error` |
//! | `relaylock_held_seconds` | histogram | seconds from acquisition to release (or to finding the lock lost) | |
//! | `relaylock_acquire_attempts_total` | counter | acquire script calls: the load locking puts on Redis | |
//! | `relaylock_acquired_total` | counter | successful acquisitions | |
//! | `relaylock_timeouts_total` | counter | waits that ran out | |
//! | `relaylock_released_total` | counter | releases that freed a lock we held | |
//! | `relaylock_lost_total` | counter | locks found lost while held: by a renewal, `extend` or release finding another token or no key, or by the lease running out before a renewal got through; each lock counted once | |
//! | `relaylock_renewals_total` | counter | watchdog renewals, per lock | `outcome` = `renewed`, `lost`, `error` |
//! | `relaylock_wakeups_total` | counter | times a waiter woke up to retry, or (`handover`) holding the lock a release of its own client gave it | `cause` = `message`, `ttl`, `reconnect`, `handover` |
//! | `relaylock_waiters` | gauge | tasks currently waiting for a lock | |
//!
//! Every series carries `primitive` (`mutex`, `semaphore`, `read`, `write`),
//! and `name` when
//! the caller set one.
//!
//! With a global recorder, each thread keeps the handles of the unnamed
//! series for up to a second instead of registering at every record (a
//! registration costs the Prometheus exporter a key copy, a hash and a map
//! lookup). An exporter that drops idle series (`idle_timeout`) must keep
//! them at least a second: with a shorter timeout, up to a second of records
//! may go to a series it already dropped. Local recorders and named series
//! register at every record.

use std::borrow::Cow;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, SharedString, Unit};

use crate::scripts::Kind;

/// Histogram of the time from a lock call to its outcome, in seconds.
pub const ACQUIRE_WAIT_SECONDS: &str = "relaylock_acquire_wait_seconds";
/// Histogram of how long locks were held, in seconds.
pub const HELD_SECONDS: &str = "relaylock_held_seconds";
/// Counter of acquire script calls.
pub const ACQUIRE_ATTEMPTS_TOTAL: &str = "relaylock_acquire_attempts_total";
/// Counter of successful acquisitions.
pub const ACQUIRED_TOTAL: &str = "relaylock_acquired_total";
/// Counter of waits that ran out.
pub const TIMEOUTS_TOTAL: &str = "relaylock_timeouts_total";
/// Counter of successful releases.
pub const RELEASED_TOTAL: &str = "relaylock_released_total";
/// Counter of locks found lost while held (each lock once).
pub const LOST_TOTAL: &str = "relaylock_lost_total";
/// Counter of watchdog renewals per lock, by outcome.
pub const RENEWALS_TOTAL: &str = "relaylock_renewals_total";
/// Counter of waiter wake-ups, by cause.
pub const WAKEUPS_TOTAL: &str = "relaylock_wakeups_total";
/// Gauge of tasks currently waiting.
pub const WAITERS: &str = "relaylock_waiters";
/// Histogram of the keys each multi-key lock acquired.
pub const MULTI_KEYS: &str = "relaylock_multi_keys";

/// Every metric name relaylock emits.
pub const ALL: &[&str] = &[
    ACQUIRE_WAIT_SECONDS,
    HELD_SECONDS,
    ACQUIRE_ATTEMPTS_TOTAL,
    ACQUIRED_TOTAL,
    TIMEOUTS_TOTAL,
    RELEASED_TOTAL,
    LOST_TOTAL,
    RENEWALS_TOTAL,
    WAKEUPS_TOTAL,
    WAITERS,
    MULTI_KEYS,
];

/// Why a waiter woke up. (The discriminants index [`Keys::wakeups`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WakeCause {
    /// A release message on the lock's channel (or the poll interval, for
    /// [`WaitStrategy::Poll`](crate::WaitStrategy::Poll)).
    Message = 0,
    /// The holder's remaining lease ran out (the safety net for lost messages).
    Ttl = 1,
    /// The subscriber reconnected or fell behind: every waiter re-checks.
    Reconnect = 2,
    /// A release of this client handed the lock to the waiter directly: it
    /// woke holding it, without a retry.
    Handover = 3,
}

/// What one renewal of one lock found. (The discriminants index
/// [`Keys::renewals`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The lease was set again.
    Renewed = 0,
    /// The key was gone or held another token.
    Lost = 1,
    /// The call failed (Redis unreachable, timeout); retried until the lease
    /// runs out.
    Error = 2,
}

/// How an acquire call ended, for [`ACQUIRE_WAIT_SECONDS`]. (The
/// discriminants index [`Keys::wait`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired = 0,
    Timeout = 1,
    Error = 2,
}

/// Every series of one primitive without a `name` label, as static keys:
/// recording one builds no label list and hashes nothing (the hash of a
/// static key is computed at compile time), where building the key for
/// each record cost two allocations and a hash (about 1 µs of client CPU
/// per acquisition, by perf, with the Prometheus exporter installed).
struct Keys {
    attempts: Key,
    acquired: Key,
    timeouts: Key,
    released: Key,
    lost: Key,
    held: Key,
    waiters: Key,
    /// By [`Outcome`].
    wait: [Key; 3],
    /// By [`Renewal`].
    renewals: [Key; 3],
    /// By [`WakeCause`].
    wakeups: [Key; 4],
}

/// The [`Keys`] of the primitive whose `primitive` label is `$p`.
macro_rules! keys {
    ($p:expr) => {{
        const fn l(key: &'static str, value: &'static str) -> Label {
            Label::from_static_parts(key, value)
        }
        static P: [Label; 1] = [l("primitive", $p)];
        static WAIT: [[Label; 2]; 3] = [
            [l("primitive", $p), l("outcome", "acquired")],
            [l("primitive", $p), l("outcome", "timeout")],
            [l("primitive", $p), l("outcome", "error")],
        ];
        static RENEWALS: [[Label; 2]; 3] = [
            [l("primitive", $p), l("outcome", "renewed")],
            [l("primitive", $p), l("outcome", "lost")],
            [l("primitive", $p), l("outcome", "error")],
        ];
        static WAKEUPS: [[Label; 2]; 4] = [
            [l("primitive", $p), l("cause", "message")],
            [l("primitive", $p), l("cause", "ttl")],
            [l("primitive", $p), l("cause", "reconnect")],
            [l("primitive", $p), l("cause", "handover")],
        ];
        Keys {
            attempts: Key::from_static_parts(ACQUIRE_ATTEMPTS_TOTAL, &P),
            acquired: Key::from_static_parts(ACQUIRED_TOTAL, &P),
            timeouts: Key::from_static_parts(TIMEOUTS_TOTAL, &P),
            released: Key::from_static_parts(RELEASED_TOTAL, &P),
            lost: Key::from_static_parts(LOST_TOTAL, &P),
            held: Key::from_static_parts(HELD_SECONDS, &P),
            waiters: Key::from_static_parts(WAITERS, &P),
            wait: [
                Key::from_static_parts(ACQUIRE_WAIT_SECONDS, &WAIT[0]),
                Key::from_static_parts(ACQUIRE_WAIT_SECONDS, &WAIT[1]),
                Key::from_static_parts(ACQUIRE_WAIT_SECONDS, &WAIT[2]),
            ],
            renewals: [
                Key::from_static_parts(RENEWALS_TOTAL, &RENEWALS[0]),
                Key::from_static_parts(RENEWALS_TOTAL, &RENEWALS[1]),
                Key::from_static_parts(RENEWALS_TOTAL, &RENEWALS[2]),
            ],
            wakeups: [
                Key::from_static_parts(WAKEUPS_TOTAL, &WAKEUPS[0]),
                Key::from_static_parts(WAKEUPS_TOTAL, &WAKEUPS[1]),
                Key::from_static_parts(WAKEUPS_TOTAL, &WAKEUPS[2]),
                Key::from_static_parts(WAKEUPS_TOTAL, &WAKEUPS[3]),
            ],
        }
    }};
}

static MUTEX: Keys = keys!(Kind::Mutex.label());
static SEMAPHORE: Keys = keys!(Kind::Semaphore.label());
static READ: Keys = keys!(Kind::Read.label());
static WRITE: Keys = keys!(Kind::Write.label());
static MULTI: Keys = keys!(Kind::Multi.label());

/// The keys of `kind`'s series.
fn keys(kind: Kind) -> &'static Keys {
    match kind {
        Kind::Mutex => &MUTEX,
        Kind::Semaphore => &SEMAPHORE,
        Kind::Read => &READ,
        Kind::Write => &WRITE,
        Kind::Multi => &MULTI,
    }
}

/// What the `metrics` macros would pass as the call site.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// `key`, with the `name` label when the caller set one (first, as the
/// exporters print the labels in the key's order).
fn named(key: &'static Key, name: Option<&SharedString>) -> Cow<'static, Key> {
    match name {
        None => Cow::Borrowed(key),
        Some(n) => {
            let mut labels = Vec::with_capacity(3);
            labels.push(Label::new("name", n.clone()));
            labels.extend(key.labels().cloned());
            Cow::Owned(Key::from_parts(key.name().to_owned(), labels))
        }
    }
}

/// Handles of the unnamed series, per thread, registered with the global
/// recorder (see [`handles`]).
const SERIES: usize = 16;
const ATTEMPTS: usize = 0;
const ACQUIRED: usize = 1;
const TIMEOUTS: usize = 2;
const RELEASED: usize = 3;
const LOST: usize = 4;
const HELD: usize = 5;
const WAIT: usize = 6; // ..9
const RENEWALS: usize = 9; // ..12
const WAKEUPS: usize = 12; // ..16

/// The cache slot of a primitive's series `column`.
fn slot(kind: Kind, column: usize) -> usize {
    let row = match kind {
        Kind::Mutex => 0,
        Kind::Semaphore => 1,
        Kind::Read => 2,
        Kind::Write => 3,
        Kind::Multi => 4,
    };
    row * SERIES + column
}

/// The static key of a primitive's series `column`: the one place the
/// columns meet the keys.
fn series(kind: Kind, column: usize) -> &'static Key {
    let k = keys(kind);
    match column {
        ATTEMPTS => &k.attempts,
        ACQUIRED => &k.acquired,
        TIMEOUTS => &k.timeouts,
        RELEASED => &k.released,
        LOST => &k.lost,
        HELD => &k.held,
        c if c < RENEWALS => &k.wait[c - WAIT],
        c if c < WAKEUPS => &k.renewals[c - RENEWALS],
        c => &k.wakeups[c - WAKEUPS],
    }
}

fn increment(kind: Kind, column: usize, name: Option<&SharedString>) {
    handles::record(
        &handles::COUNTERS,
        slot(kind, column),
        (series(kind, column), name),
        |r, k| r.register_counter(k, &METADATA),
        |c| c.increment(1),
    );
}

fn observe(kind: Kind, column: usize, name: Option<&SharedString>, v: f64) {
    handles::record(
        &handles::HISTOGRAMS,
        slot(kind, column),
        (series(kind, column), name),
        |r, k| r.register_histogram(k, &METADATA),
        |h| h.record(v),
    );
}

/// Registering a series with a recorder on every record costs that
/// recorder's lookup: with the Prometheus exporter, a key copy, a hash and a
/// locked map, about 0.2 µs, five times per acquisition. So the handles of
/// the unnamed series are kept, per thread, for [`REFRESH`](handles::REFRESH)
/// when they come from the GLOBAL recorder, which lives as long as the
/// process at one address:
///
/// * a local recorder (`metrics::with_local_recorder`, a test's) is never
///   cached: its address may later hold another one. Each record registers
///   with it, as before;
/// * the global recorder is found by a probe on a fresh thread (which has
///   no local recorder), started when records meet a recorder not known to
///   be the global one: at once, then after 1 s, 2 s, ... up to a minute
///   between probes while none is found (a global recorder installed late
///   is found within a minute); until then, records register each time;
/// * a handle is registered again after `REFRESH`, so a series an exporter
///   dropped for being idle (an `idle_timeout` of at least `REFRESH`) comes
///   back at its next record;
/// * named series (`LockOptions::name`) register each time.
mod handles {
    use std::cell::RefCell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::thread::LocalKey;
    use std::time::{Duration, Instant};

    use metrics::{Counter, Histogram, Key, Recorder, SharedString};

    use super::{named, SERIES};

    /// How long a thread uses a handle before it registers again.
    pub(super) const REFRESH: Duration = Duration::from_secs(1);

    /// The longest wait between two probes.
    const PROBE_GAP_MAX: Duration = Duration::from_secs(60);

    const SLOTS: usize = 5 * SERIES;

    type Cache<H> = RefCell<Vec<Option<(Instant, H)>>>;

    thread_local! {
        pub(super) static COUNTERS: Cache<Counter> = const { RefCell::new(Vec::new()) };
        pub(super) static HISTOGRAMS: Cache<Histogram> = const { RefCell::new(Vec::new()) };
    }

    /// The global recorder as a probe found it: its address and size (0:
    /// not found yet).
    static GLOBAL: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

    fn identity(r: &dyn Recorder) -> (usize, usize) {
        (
            (r as *const dyn Recorder).cast::<()>() as usize,
            std::mem::size_of_val(r),
        )
    }

    fn is_global(r: &dyn Recorder) -> bool {
        let (address, size) = identity(r);
        address != 0
            && GLOBAL[0].load(Ordering::Relaxed) == address
            && GLOBAL[1].load(Ordering::Relaxed) == size
    }

    /// Record `op` on the series `key` (with `name`, if any) through the
    /// current recorder.
    pub(super) fn record<H: Clone + 'static>(
        cache: &'static LocalKey<Cache<H>>,
        slot: usize,
        (key, name): (&'static Key, Option<&SharedString>),
        register: impl Fn(&dyn Recorder, &Key) -> H,
        op: impl FnOnce(&H),
    ) {
        metrics::with_recorder(|r| {
            if name.is_none() && is_global(r) {
                with_cached(cache, slot, || register(r, key), op);
            } else {
                probe(r);
                op(&register(r, &named(key, name)));
            }
        });
    }

    /// Run `op` on this thread's handle of `slot`, registered again when
    /// older than `REFRESH` (or when the thread's cache is gone: it is
    /// exiting; or when its cell is borrowed: a record made from inside a
    /// recorder's own record, which then is not kept). The handle is used in
    /// place, not cloned: a clone and a drop per record are two atomic
    /// operations on its `Arc`'s count, which a recorder that hands every
    /// thread the same `Arc` (metrics-util's `DebuggingRecorder`) shares
    /// between all the recording threads. (The Prometheus exporter wraps
    /// each registration in an `Arc` of its own.)
    fn with_cached<H: Clone + 'static>(
        cache: &'static LocalKey<Cache<H>>,
        slot: usize,
        register: impl FnOnce() -> H,
        op: impl FnOnce(&H),
    ) {
        let now = Instant::now();
        let mut op = Some(op);
        let _ = cache.try_with(|c| {
            let Ok(c) = c.try_borrow() else { return };
            if let Some(Some((at, h))) = c.get(slot) {
                if now.saturating_duration_since(*at) < REFRESH {
                    if let Some(op) = op.take() {
                        op(h);
                    }
                }
            }
        });
        let Some(op) = op else { return };
        let h = register();
        op(&h);
        let _ = cache.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                if c.len() < SLOTS {
                    c.resize(SLOTS, None);
                }
                c[slot] = Some((now, h));
            }
        });
    }

    /// Learn the global recorder's identity on a fresh thread, while none
    /// is known and records meet a recorder that may be it (the no-op
    /// recorder, zero-sized, has nothing to cache): one second after the
    /// last probe, then twice as long each time up to a minute (a process
    /// that only ever uses local recorders probes once a minute).
    fn probe(r: &dyn Recorder) {
        struct Next {
            at: Option<Instant>,
            gap: Duration,
        }
        static NEXT: Mutex<Next> = Mutex::new(Next {
            at: None,
            gap: REFRESH,
        });
        if GLOBAL[0].load(Ordering::Relaxed) != 0 || std::mem::size_of_val(r) == 0 {
            return;
        }
        let Ok(mut next) = NEXT.try_lock() else {
            return;
        };
        let now = Instant::now();
        if next.at.is_some_and(|at| now < at) {
            return;
        }
        next.at = Some(now + next.gap);
        next.gap = (next.gap * 2).min(PROBE_GAP_MAX);
        drop(next);
        let _ = std::thread::Builder::new()
            .name("relaylock-metrics-probe".into())
            .spawn(|| {
                let (address, size) = metrics::with_recorder(identity);
                if size > 0 {
                    GLOBAL[1].store(size, Ordering::Relaxed);
                    GLOBAL[0].store(address, Ordering::Relaxed);
                }
            });
    }
}

/// Describe every metric once, so exporters print units and help texts.
pub(crate) fn describe() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        metrics::describe_histogram!(
            ACQUIRE_WAIT_SECONDS,
            Unit::Seconds,
            "Time from a lock call to its outcome"
        );
        metrics::describe_histogram!(HELD_SECONDS, Unit::Seconds, "Time a lock was held");
        metrics::describe_counter!(
            ACQUIRE_ATTEMPTS_TOTAL,
            Unit::Count,
            "Acquire script calls sent to Redis"
        );
        metrics::describe_counter!(ACQUIRED_TOTAL, Unit::Count, "Locks acquired");
        metrics::describe_counter!(TIMEOUTS_TOTAL, Unit::Count, "Lock waits that ran out");
        metrics::describe_counter!(RELEASED_TOTAL, Unit::Count, "Locks released");
        metrics::describe_counter!(
            LOST_TOTAL,
            Unit::Count,
            "Locks found lost while held (renewal, extend or release found another token or no key, or the lease ran out)"
        );
        metrics::describe_counter!(
            RENEWALS_TOTAL,
            Unit::Count,
            "Watchdog lease renewals per lock, by outcome"
        );
        metrics::describe_counter!(WAKEUPS_TOTAL, Unit::Count, "Waiter wake-ups by cause");
        metrics::describe_gauge!(WAITERS, Unit::Count, "Tasks waiting for a lock");
        metrics::describe_histogram!(
            MULTI_KEYS,
            Unit::Count,
            "Keys each multi-key lock acquired"
        );
    });
}

pub(crate) fn attempt(name: Option<&SharedString>, kind: Kind) {
    increment(kind, ATTEMPTS, name);
}

pub(crate) fn finished(
    name: Option<&SharedString>,
    kind: Kind,
    outcome: Outcome,
    waited: Duration,
) {
    observe(kind, WAIT + outcome as usize, name, waited.as_secs_f64());
    match outcome {
        Outcome::Acquired => increment(kind, ACQUIRED, name),
        Outcome::Timeout => increment(kind, TIMEOUTS, name),
        Outcome::Error => {}
    }
}

pub(crate) fn released(name: Option<&SharedString>, kind: Kind) {
    increment(kind, RELEASED, name);
}

pub(crate) fn lost(name: Option<&SharedString>, kind: Kind) {
    increment(kind, LOST, name);
}

pub(crate) fn renewal(name: Option<&SharedString>, kind: Kind, outcome: Renewal) {
    increment(kind, RENEWALS + outcome as usize, name);
}

pub(crate) fn held(name: Option<&SharedString>, kind: Kind, held: Duration) {
    observe(kind, HELD, name, held.as_secs_f64());
}

pub(crate) fn wakeup(name: Option<&SharedString>, kind: Kind, cause: WakeCause) {
    increment(kind, WAKEUPS + cause as usize, name);
}

/// A multi-key lock acquired `keys` keys.
pub(crate) fn multi_keys(name: Option<&SharedString>, keys: usize) {
    static LABELS: [Label; 1] = [Label::from_static_parts("primitive", "multi")];
    static KEY: Key = Key::from_static_parts(MULTI_KEYS, &LABELS);
    let key = named(&KEY, name);
    metrics::with_recorder(|r| r.register_histogram(&key, &METADATA)).record(keys as f64);
}

pub(crate) fn waiters(name: Option<&SharedString>, kind: Kind, delta: f64) {
    let key = named(&keys(kind).waiters, name);
    metrics::with_recorder(|r| r.register_gauge(&key, &METADATA)).increment(delta);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A caller's `name` label comes first, as README's exporter output
    /// shows it; without one the static key is used as it is.
    #[test]
    fn the_name_label_comes_first() {
        let name = SharedString::from("orders");
        let key = named(
            &keys(Kind::Mutex).wait[Outcome::Timeout as usize],
            Some(&name),
        );
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        assert_eq!(key.name(), ACQUIRE_WAIT_SECONDS);
        assert_eq!(
            labels,
            [
                ("name", "orders"),
                ("primitive", "mutex"),
                ("outcome", "timeout")
            ]
        );
        let plain = named(
            &keys(Kind::Write).wakeups[WakeCause::Handover as usize],
            None,
        );
        let labels: Vec<(&str, &str)> = plain.labels().map(|l| (l.key(), l.value())).collect();
        assert_eq!(labels, [("primitive", "write"), ("cause", "handover")]);
    }

    /// Each (primitive, column) is one series of its own, in a slot of its
    /// own: a kept handle can only stand for the key it was registered
    /// with.
    #[test]
    fn every_column_is_one_series_in_one_slot() {
        let kinds = [
            Kind::Mutex,
            Kind::Semaphore,
            Kind::Read,
            Kind::Write,
            Kind::Multi,
        ];
        let mut seen_keys = Vec::new();
        let mut seen_slots = std::collections::HashSet::new();
        for kind in kinds {
            for column in 0..SERIES {
                let key = series(kind, column);
                assert!(
                    !seen_keys.contains(&key),
                    "{kind:?} column {column} repeats a key"
                );
                seen_keys.push(key);
                assert!(seen_slots.insert(slot(kind, column)));
                assert!(slot(kind, column) < 5 * SERIES);
            }
        }
        assert_eq!(
            series(Kind::Write, WAKEUPS + WakeCause::Handover as usize),
            &keys(Kind::Write).wakeups[WakeCause::Handover as usize]
        );
        assert_eq!(
            series(Kind::Read, RENEWALS + Renewal::Error as usize),
            &keys(Kind::Read).renewals[Renewal::Error as usize]
        );
    }

    /// A recorder that counts the registrations of one series (the write
    /// lock's renewal errors: no other test records it), and hands out one
    /// shared handle for it.
    struct Registrations(std::sync::atomic::AtomicUsize, Arc<Shares>);

    impl Registrations {
        fn new() -> Self {
            let shares = Arc::new_cyclic(|me| Shares {
                me: me.clone(),
                most: Default::default(),
            });
            Registrations(Default::default(), shares)
        }

        fn count(&self) -> usize {
            self.0.load(std::sync::atomic::Ordering::SeqCst)
        }
    }

    /// A counter handle that notes the most references to itself seen while
    /// it counts: the recorder's, each thread's kept one, and any clone made
    /// for the record.
    struct Shares {
        me: std::sync::Weak<Shares>,
        most: std::sync::atomic::AtomicUsize,
    }

    impl metrics::CounterFn for Shares {
        fn increment(&self, _: u64) {
            let now = self.me.strong_count();
            self.most
                .fetch_max(now, std::sync::atomic::Ordering::SeqCst);
        }
        fn absolute(&self, _: u64) {}
    }

    impl metrics::Recorder for Registrations {
        fn describe_counter(&self, _: metrics::KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: metrics::KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: metrics::KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> metrics::Counter {
            let labels: Vec<_> = key.labels().map(|l| (l.key(), l.value())).collect();
            if key.name() == RENEWALS_TOTAL
                && labels.contains(&("primitive", "write"))
                && labels.contains(&("outcome", "error"))
            {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return metrics::Counter::from_arc(Arc::clone(&self.1));
            }
            metrics::Counter::noop()
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    /// With the global recorder (once the probe found it), a thread
    /// registers a series once and again only after `REFRESH` (so a series
    /// an exporter dropped as idle comes back); a local recorder and a
    /// named series register at every record.
    #[test]
    fn global_handles_are_kept_for_a_while_local_ones_never() {
        let global: &'static Registrations = Box::leak(Box::new(Registrations::new()));
        metrics::set_global_recorder(global).expect("no other test installs a global recorder");
        let record = || renewal(None, Kind::Write, Renewal::Error);
        // Until the probe thread answers, every record registers.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let before = global.count();
            record();
            record();
            if global.count() == before + 1 {
                break; // the second record used the first one's handle
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the probe never found the recorder"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // 100 records within `REFRESH` of a registration use its handle (a
        // round that a descheduled thread stretched past it is repeated).
        loop {
            std::thread::sleep(handles::REFRESH + Duration::from_millis(50));
            let started = std::time::Instant::now();
            record(); // registers again: the handle is older than REFRESH
            global.1.most.store(0, std::sync::atomic::Ordering::SeqCst);
            let kept = global.count();
            for _ in 0..100 {
                record();
            }
            if started.elapsed() < handles::REFRESH {
                assert_eq!(global.count(), kept, "a kept handle registers nothing");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never a quiet round");
        }
        // Those 100 used the kept handle where it is kept, not a clone: the
        // recorder's reference and this thread's, no third (this recorder
        // hands every thread one `Arc`, whose count a clone per record would
        // touch twice).
        assert_eq!(global.1.most.load(std::sync::atomic::Ordering::SeqCst), 2);
        let kept = global.count();
        std::thread::sleep(handles::REFRESH + Duration::from_millis(50));
        record();
        assert_eq!(global.count(), kept + 1, "registered again after REFRESH");

        // A named series registers at every record.
        let name = SharedString::from("orders");
        let before = global.count();
        for _ in 0..3 {
            renewal(Some(&name), Kind::Write, Renewal::Error);
        }
        assert_eq!(global.count(), before + 3);
        let kept = global.count();

        // A local recorder is never kept: its address may later be another's.
        let local = Registrations::new();
        metrics::with_local_recorder(&local, || {
            for _ in 0..3 {
                record();
            }
        });
        assert_eq!(local.count(), 3);
        assert_eq!(global.count(), kept, "the global recorder saw none of them");
    }
}
