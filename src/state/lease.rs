//! [`LeaseRecord`]: what a guard and the watchdog know about one lease,
//! and the rules that keep the recorded lease never later than the real one
//! (see docs/design.md, "The watchdog"). Pure state behind a mutex, shared
//! by the guard and the watchdog; the loom models in `relaylock-loom`
//! compile it with loom's primitives.

use std::time::{Duration, Instant};

use super::sync::{self, AtomicBool, Mutex, MutexGuard, Ordering};

/// How long before the end of a lease, as this process's clock sees it, the
/// lock stops counting as held: a tenth of the lease, at most 1 s, plus 1 ms
/// for Redis's millisecond expiry resolution. It absorbs the drift between
/// this clock and the server's while the lease runs.
pub(crate) fn margin(lease: Duration) -> Duration {
    (lease / 10).min(Duration::from_secs(1)) + Duration::from_millis(1)
}

/// What is known about one lease: the last confirmed setting, the
/// generations of `extend`, and whether the lock is known lost.
pub(crate) struct LeaseRecord {
    state: Mutex<LeaseState>,
    lost: AtomicBool,
}

/// A snapshot of a [`LeaseRecord`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseState {
    /// When the command that last set the lease was sent: the lease began no
    /// earlier than this.
    pub(crate) sent: Instant,
    /// The lease that command set.
    pub(crate) lease: Duration,
    /// The lease renewals set (changed by `extend`).
    pub(crate) renew_with: Duration,
    /// Bumped by every `extend`: a renewal built before it may have reached
    /// Redis before or after it, so its reply confirms nothing.
    pub(crate) generation: u64,
    /// Where the newest `extend` call is (see [`Pending`]).
    extend: Pending,
    /// The shortest lease of an `extend` whose command may still reach
    /// Redis late, after commands sent later (it was sent on a connection
    /// fred replaced, or its outcome is unknown): every later confirmation
    /// counts at most this lease, since that copy may still set it.
    stray: Option<Duration>,
}

/// Where the `extend` calls of a lock are, for judging replies: a renewal
/// (or an extend) can only set the record when it was sent after every
/// command of every other extend was queued (then it ran after them on the
/// same connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    /// `extend` futures alive: any command of theirs may still be queued
    /// after a renewal, so renewals confirm nothing, and an extend's reply
    /// may only lower the record.
    in_flight: u32,
    /// When the last `extend` future ended (replied, failed, timed out or
    /// dropped): every command it queued was queued before. A renewal sent
    /// before it may have run before that extend, even when the extend
    /// succeeded and its reply was processed first (found by the loom model
    /// `extend (completed) vs renewal`): it confirms nothing.
    ended_at: Option<Instant>,
    /// When the last extend that was NOT the newest one ended: if after the
    /// newest one was sent, the older one's commands may run after it.
    older_ended_at: Option<Instant>,
}

impl Pending {
    /// Whether a command sent at `sent` ran after every extend's commands.
    fn after_extends(&self, sent: Instant) -> bool {
        self.in_flight == 0 && self.ended_at.is_none_or(|at| sent > at)
    }
}

impl LeaseState {
    /// Until when the lock is certainly still ours, by this process's clock.
    pub(crate) fn safe_until(&self) -> Instant {
        self.sent + self.lease.saturating_sub(margin(self.lease))
    }

    /// What a confirmation of `lease` may count: no more than a stray
    /// extend's lease.
    fn capped(&self, lease: Duration) -> Duration {
        self.stray.map_or(lease, |stray| lease.min(stray))
    }
}

impl LeaseRecord {
    pub(crate) fn new(sent: Instant, lease: Duration) -> Self {
        LeaseRecord {
            state: Mutex::new(LeaseState {
                sent,
                lease,
                renew_with: lease,
                generation: 0,
                extend: Pending {
                    in_flight: 0,
                    ended_at: None,
                    older_ended_at: None,
                },
                stray: None,
            }),
            lost: AtomicBool::new(false),
        }
    }

    fn state(&self) -> MutexGuard<'_, LeaseState> {
        sync::lock(&self.state)
    }

    /// The record now.
    pub(crate) fn snapshot(&self) -> LeaseState {
        *self.state()
    }

    /// Until when the lock is certainly still ours, by this process's clock.
    pub(crate) fn safe_until(&self) -> Instant {
        self.state().safe_until()
    }

    /// An `extend(lease)` sent at `sent` is about to go out. Whatever becomes
    /// of it (it may run in Redis even if its caller never learns the
    /// outcome), the recorded lease must not end later than the real one: if
    /// it would end earlier than the recorded lease, the record takes it
    /// now. Renewals built before it confirm nothing from here on (new
    /// generation). Returns the generation to confirm it with.
    pub(crate) fn extending(&self, sent: Instant, lease: Duration) -> u64 {
        let mut s = self.state();
        s.generation += 1;
        s.extend.in_flight += 1;
        let shorter = LeaseState { sent, lease, ..*s };
        if shorter.safe_until() < s.safe_until() {
            s.sent = sent;
            s.lease = lease;
        }
        s.generation
    }

    /// The `extend(lease)` of `generation`, sent at `sent`, succeeded:
    /// renewals use `lease` from now on, and the lease is known to run from
    /// `sent`, unless a later `extend` started meanwhile (that one decides).
    /// A renewal that ran after it only ever lengthens the lease (`RENEW` in
    /// grow-only mode): the safe direction.
    ///
    /// With other `extend` calls still in flight (or ended after this one
    /// was sent), their commands may run after this one in Redis: then the
    /// reply may only lower the record (an older extend, re-sent after a
    /// `NOSCRIPT` reload, may run after a newer, longer one and set the
    /// shorter lease in Redis).
    pub(crate) fn extended(&self, generation: u64, sent: Instant, lease: Duration) {
        let mut s = self.state();
        if s.generation != generation {
            return;
        }
        s.renew_with = lease;
        let lease = s.capped(lease);
        let confirmed = LeaseState { sent, lease, ..*s };
        // This extend ran last in Redis when no other is alive and every
        // older one ended before it was sent.
        let ran_last =
            s.extend.in_flight == 0 && s.extend.older_ended_at.is_none_or(|at| at < sent);
        if ran_last || confirmed.safe_until() < s.safe_until() {
            s.sent = sent;
            s.lease = lease;
        }
    }

    /// The future of the `extend` of `generation` ended at `at` (its reply
    /// arrived, it failed, or it is being dropped): every command it queued
    /// was queued before `at`, and renewals sent after `at` confirm again.
    ///
    /// `stray`: the extend's lease, when a copy of its command may still run
    /// after commands sent later: it got no reply, or fred replaced the
    /// connection while it ran (a copy written on the old connection can
    /// still arrive). From then on no confirmation counts a longer lease
    /// (a shortening extend stuck on a dropped connection can run after the
    /// next renewal, and leave Redis with the shorter lease).
    pub(crate) fn extend_ended(&self, generation: u64, at: Instant, stray: Option<Duration>) {
        let mut s = self.state();
        if let Some(lease) = stray {
            s.stray = Some(s.stray.map_or(lease, |l| l.min(lease)));
        }
        s.extend.in_flight = s.extend.in_flight.saturating_sub(1);
        s.extend.ended_at = Some(s.extend.ended_at.map_or(at, |e| e.max(at)));
        if generation != s.generation {
            s.extend.older_ended_at = Some(s.extend.older_ended_at.map_or(at, |e| e.max(at)));
        }
    }

    /// A renewal of generation `generation`, sent at `sent`, set `lease`.
    pub(crate) fn renewed(&self, generation: u64, sent: Instant, lease: Duration) {
        let mut s = self.state();
        if s.generation == generation && s.extend.after_extends(sent) && sent >= s.sent {
            s.sent = sent;
            s.lease = s.capped(lease);
        }
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Record the loss; `true` for the first caller only.
    pub(crate) fn set_lost(&self) -> bool {
        !self.lost.swap(true, Ordering::SeqCst)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn margins() {
        assert_eq!(margin(Duration::from_secs(30)), Duration::from_millis(1001));
        assert_eq!(margin(Duration::from_secs(3)), Duration::from_millis(301));
        assert_eq!(
            margin(Duration::from_millis(1)),
            Duration::from_micros(1100)
        );
    }

    #[test]
    fn lease_confirmations_only_move_forward() {
        let t0 = Instant::now();
        let l = LeaseRecord::new(t0, Duration::from_secs(3));
        let at = |ms| t0 + Duration::from_millis(ms);
        let g = renewals_around_a_shortening_extend(&l, at);
        lengthening_and_stray_extends(&l, at, g);
        overlapping_extends(t0, at);
    }

    /// Renewals and a shortening extend on a 3 s lease taken at `at(0)`:
    /// returns the extend's generation.
    fn renewals_around_a_shortening_extend(l: &LeaseRecord, at: impl Fn(u64) -> Instant) -> u64 {
        assert_eq!(l.safe_until(), at(3000 - 301));
        l.renewed(0, at(1000), Duration::from_secs(3));
        assert_eq!(l.safe_until(), at(4000 - 301));
        // An older command's confirmation arriving late changes nothing.
        l.renewed(0, at(500), Duration::from_secs(30));
        assert_eq!(l.safe_until(), at(4000 - 301));
        // After an extend, a renewal built before it confirms nothing, even
        // one sent later: on the wire it may have run first.
        let g = l.extending(at(2000), Duration::from_secs(1));
        assert_eq!(g, 1);
        // A shortening extend counts from the moment it is sent, before its
        // reply: a cancelled or failed call may still have run.
        assert_eq!(l.safe_until(), at(3000 - 101));
        // While it is in flight, even a renewal of its generation confirms
        // nothing: the extend may still be queued behind it.
        l.renewed(1, at(2100), Duration::from_secs(3));
        assert_eq!(l.safe_until(), at(3000 - 101));
        // Its future ends (the reply arrived) at 2010, then the reply is
        // applied, as `LockGuard::extend` does.
        l.extend_ended(g, at(2010), None);
        l.extended(g, at(2000), Duration::from_secs(1));
        assert_eq!(l.safe_until(), at(3000 - 101));
        // A renewal sent before the extend's future ended confirms nothing,
        // even of the new generation: it may have run before the extend.
        l.renewed(1, at(2005), Duration::from_secs(3));
        assert_eq!(l.safe_until(), at(3000 - 101));
        l.renewed(0, at(2500), Duration::from_secs(3));
        assert_eq!(l.safe_until(), at(3000 - 101));
        l.renewed(1, at(2500), Duration::from_secs(1));
        assert_eq!(l.safe_until(), at(3500 - 101));
        g
    }

    /// After [`renewals_around_a_shortening_extend`] (whose extend is `g`):
    /// lengthening extends, and a stray shortening one.
    fn lengthening_and_stray_extends(l: &LeaseRecord, at: impl Fn(u64) -> Instant, g: u64) {
        // A lengthening extend changes the record only once it succeeded;
        // the reply of an older extend changes nothing after a newer one
        // started.
        let g2 = l.extending(at(3000), Duration::from_secs(10));
        assert_eq!(l.safe_until(), at(3500 - 101));
        l.extended(g, at(2000), Duration::from_secs(1));
        assert_eq!(l.safe_until(), at(3500 - 101));
        l.extend_ended(g2, at(3010), None);
        l.extended(g2, at(3000), Duration::from_secs(10));
        assert_eq!(l.safe_until(), at(13000 - 1001));
        // A shortening extend whose reply came back on the connection it
        // was sent on, at 4100: a renewal sent before then confirms
        // nothing, one sent after does.
        let g3 = l.extending(at(4000), Duration::from_millis(200));
        assert_eq!(l.safe_until(), at(4200 - 21));
        l.extend_ended(g3, at(4100), None);
        l.extended(g3, at(4000), Duration::from_millis(200));
        l.renewed(g3, at(4050), Duration::from_secs(10));
        assert_eq!(l.safe_until(), at(4200 - 21));
        l.renewed(g3, at(4150), Duration::from_secs(10));
        assert_eq!(l.safe_until(), at(14150 - 1001));
        // A shortening extend abandoned (or replayed on a new connection):
        // a copy may still set 300 ms after any later command, so from now
        // on no confirmation counts more than 300 ms, however long the
        // renewal or a later extend asks for.
        let g4 = l.extending(at(5000), Duration::from_millis(300));
        assert_eq!(l.safe_until(), at(5300 - 31));
        l.extend_ended(g4, at(5100), Some(Duration::from_millis(300)));
        l.renewed(g4, at(5150), Duration::from_secs(10));
        assert_eq!(l.safe_until(), at(5450 - 31));
        let g5 = l.extending(at(5200), Duration::from_secs(20));
        l.extend_ended(g5, at(5210), None);
        l.extended(g5, at(5200), Duration::from_secs(20));
        assert_eq!(l.safe_until(), at(5500 - 31));
        assert_eq!(l.snapshot().renew_with, Duration::from_secs(20));
    }

    /// Two extends that overlap, and a lease shorter than its margin.
    fn overlapping_extends(t0: Instant, at: impl Fn(u64) -> Instant) {
        // Two extends overlap: the newer one's reply, while the older one
        // is still in flight, may not raise the record (the older one may
        // still run after it in Redis).
        let o = LeaseRecord::new(t0, Duration::from_secs(30));
        let old = o.extending(at(100), Duration::from_millis(500));
        let new = o.extending(at(110), Duration::from_secs(20));
        o.extend_ended(new, at(150), None);
        o.extended(new, at(110), Duration::from_secs(20));
        assert_eq!(o.safe_until(), at(600 - 51));
        o.extend_ended(old, at(700), None);
        o.extended(old, at(100), Duration::from_millis(500));
        assert_eq!(o.safe_until(), at(600 - 51));
        // A lease shorter than its margin is never safe.
        let tiny = LeaseRecord::new(t0, Duration::from_millis(1));
        assert!(tiny.safe_until() <= t0);
    }
}
