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

use std::borrow::Cow;
use std::time::Duration;

use metrics::{Counter, Histogram, Key, Label, Level, Metadata, SharedString, Unit};

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
    ($p:literal) => {{
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

static MUTEX: Keys = keys!("mutex");
static SEMAPHORE: Keys = keys!("semaphore");
static READ: Keys = keys!("read");
static WRITE: Keys = keys!("write");

/// The keys of `kind`'s series.
fn keys(kind: Kind) -> &'static Keys {
    match kind {
        Kind::Mutex => &MUTEX,
        Kind::Semaphore => &SEMAPHORE,
        Kind::Read => &READ,
        Kind::Write => &WRITE,
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

fn counter(key: &'static Key, name: Option<&SharedString>) -> Counter {
    let key = named(key, name);
    metrics::with_recorder(|r| r.register_counter(&key, &METADATA))
}

fn histogram(key: &'static Key, name: Option<&SharedString>) -> Histogram {
    let key = named(key, name);
    metrics::with_recorder(|r| r.register_histogram(&key, &METADATA))
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
    });
}

pub(crate) fn attempt(name: Option<&SharedString>, kind: Kind) {
    counter(&keys(kind).attempts, name).increment(1);
}

pub(crate) fn finished(
    name: Option<&SharedString>,
    kind: Kind,
    outcome: Outcome,
    waited: Duration,
) {
    let keys = keys(kind);
    histogram(&keys.wait[outcome as usize], name).record(waited.as_secs_f64());
    match outcome {
        Outcome::Acquired => counter(&keys.acquired, name).increment(1),
        Outcome::Timeout => counter(&keys.timeouts, name).increment(1),
        Outcome::Error => {}
    }
}

pub(crate) fn released(name: Option<&SharedString>, kind: Kind) {
    counter(&keys(kind).released, name).increment(1);
}

pub(crate) fn lost(name: Option<&SharedString>, kind: Kind) {
    counter(&keys(kind).lost, name).increment(1);
}

pub(crate) fn renewal(name: Option<&SharedString>, kind: Kind, outcome: Renewal) {
    counter(&keys(kind).renewals[outcome as usize], name).increment(1);
}

pub(crate) fn held(name: Option<&SharedString>, kind: Kind, held: Duration) {
    histogram(&keys(kind).held, name).record(held.as_secs_f64());
}

pub(crate) fn wakeup(name: Option<&SharedString>, kind: Kind, cause: WakeCause) {
    counter(&keys(kind).wakeups[cause as usize], name).increment(1);
}

pub(crate) fn waiters(name: Option<&SharedString>, kind: Kind, delta: f64) {
    let key = named(&keys(kind).waiters, name);
    metrics::with_recorder(|r| r.register_gauge(&key, &METADATA)).increment(delta);
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
