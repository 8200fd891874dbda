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

use std::time::Duration;

use metrics::{Label, SharedString, Unit};

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

/// Why a waiter woke up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WakeCause {
    /// A release message on the lock's channel (or the poll interval, for
    /// [`WaitStrategy::Poll`](crate::WaitStrategy::Poll)).
    Message,
    /// The holder's remaining lease ran out (the safety net for lost messages).
    Ttl,
    /// The subscriber reconnected or fell behind: every waiter re-checks.
    Reconnect,
    /// A release of this client handed the lock to the waiter directly: it
    /// woke holding it, without a retry.
    Handover,
}

impl WakeCause {
    fn as_str(self) -> &'static str {
        match self {
            WakeCause::Message => "message",
            WakeCause::Ttl => "ttl",
            WakeCause::Reconnect => "reconnect",
            WakeCause::Handover => "handover",
        }
    }
}

/// What one renewal of one lock found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// The lease was set again.
    Renewed,
    /// The key was gone or held another token.
    Lost,
    /// The call failed (Redis unreachable, timeout); retried until the lease
    /// runs out.
    Error,
}

/// How an acquire call ended, for [`ACQUIRE_WAIT_SECONDS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    Timeout,
    Error,
}

/// The `primitive` label's value.
fn primitive(kind: Kind) -> &'static str {
    match kind {
        Kind::Mutex => "mutex",
        Kind::Semaphore => "semaphore",
        Kind::Read => "read",
        Kind::Write => "write",
    }
}

fn labels(
    name: Option<&SharedString>,
    kind: Kind,
    extra: Option<(&'static str, &'static str)>,
) -> Vec<Label> {
    let mut v = Vec::with_capacity(3);
    if let Some(n) = name {
        v.push(Label::new("name", n.clone()));
    }
    v.push(Label::new("primitive", primitive(kind)));
    if let Some((k, val)) = extra {
        v.push(Label::new(k, val));
    }
    v
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
    metrics::counter!(ACQUIRE_ATTEMPTS_TOTAL, labels(name, kind, None)).increment(1);
}

pub(crate) fn finished(
    name: Option<&SharedString>,
    kind: Kind,
    outcome: Outcome,
    waited: Duration,
) {
    let o = match outcome {
        Outcome::Acquired => "acquired",
        Outcome::Timeout => "timeout",
        Outcome::Error => "error",
    };
    metrics::histogram!(
        ACQUIRE_WAIT_SECONDS,
        labels(name, kind, Some(("outcome", o)))
    )
    .record(waited.as_secs_f64());
    match outcome {
        Outcome::Acquired => {
            metrics::counter!(ACQUIRED_TOTAL, labels(name, kind, None)).increment(1)
        }
        Outcome::Timeout => {
            metrics::counter!(TIMEOUTS_TOTAL, labels(name, kind, None)).increment(1)
        }
        Outcome::Error => {}
    }
}

pub(crate) fn released(name: Option<&SharedString>, kind: Kind) {
    metrics::counter!(RELEASED_TOTAL, labels(name, kind, None)).increment(1);
}

pub(crate) fn lost(name: Option<&SharedString>, kind: Kind) {
    metrics::counter!(LOST_TOTAL, labels(name, kind, None)).increment(1);
}

pub(crate) fn renewal(name: Option<&SharedString>, kind: Kind, outcome: Renewal) {
    let o = match outcome {
        Renewal::Renewed => "renewed",
        Renewal::Lost => "lost",
        Renewal::Error => "error",
    };
    metrics::counter!(RENEWALS_TOTAL, labels(name, kind, Some(("outcome", o)))).increment(1);
}

pub(crate) fn held(name: Option<&SharedString>, kind: Kind, held: Duration) {
    metrics::histogram!(HELD_SECONDS, labels(name, kind, None)).record(held.as_secs_f64());
}

pub(crate) fn wakeup(name: Option<&SharedString>, kind: Kind, cause: WakeCause) {
    metrics::counter!(
        WAKEUPS_TOTAL,
        labels(name, kind, Some(("cause", cause.as_str())))
    )
    .increment(1);
}

pub(crate) fn waiters(name: Option<&SharedString>, kind: Kind, delta: f64) {
    metrics::gauge!(WAITERS, labels(name, kind, None)).increment(delta);
}
