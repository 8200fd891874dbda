//! [`Estimate`]: what the local waiters of one key know of its holder, and
//! who of them re-checks when. Pure state (the registry keeps it under a
//! mutex); every function takes the current time, so the loom models and
//! unit tests drive it with chosen instants.

use std::time::{Duration, Instant};

use super::limits::MAX_LEASE;

/// When a lease of `lease` seen at `at` ends, for waking waiters: capped at
/// [`MAX_LEASE`]. A longer one (a key written by something else, a garbage
/// `t:` message) is re-checked after that instead of overflowing the clock.
pub(crate) fn expiry_after(at: Instant, lease: Duration) -> Instant {
    at + lease.min(MAX_LEASE)
}

/// Observations of one lease closer than this are the same lease.
const JITTER: Duration = Duration::from_millis(2);

/// The shared knowledge of one key's holder.
#[derive(Debug, Default)]
pub(crate) struct Estimate {
    /// When the newest observation of the holder's lease was made (a try
    /// sent, a `t:` message received, a local acquisition sent).
    seen: Option<Instant>,
    /// When the CURRENT holder's lease ends, as the newest observation says.
    expiry: Option<Instant>,
    /// When the newest try of this client was sent.
    own_seen: Option<Instant>,
    /// When the lease that this client's own newest try saw ends: by then
    /// one local waiter tries again even while other clients keep handing
    /// the lock to each other, so a client that fell out of the queue
    /// queues again.
    recheck: Option<Instant>,
    /// While the channel is degraded (not confirmed): when the next poll of
    /// the lock may start.
    poll_at: Option<Instant>,
    /// When the last attempt to subscribe the channel failed (cleared by a
    /// success).
    pub(crate) failed_at: Option<Instant>,
}

impl Estimate {
    /// The next moment a local waiter must re-check: the earlier of the
    /// holder's lease end and this client's own re-check.
    pub(crate) fn due(&self) -> Option<Instant> {
        match (self.expiry, self.recheck) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The lock is held until `lease` after `seen`. The newest observation
    /// wins, earlier or later: it describes the current holder. An `own`
    /// observation (this client's try or acquisition) also sets the
    /// re-check. Returns whether the next re-check moved earlier (sleepers
    /// must recompute their bound).
    pub(crate) fn observe(&mut self, seen: Instant, lease: Duration, own: bool) -> bool {
        let end = expiry_after(seen, lease) + Duration::from_millis(1);
        let before = self.due();
        if self.seen.is_none_or(|s| s <= seen) {
            self.seen = Some(seen);
            self.expiry = Some(end);
        }
        if own && self.own_seen.is_none_or(|s| s <= seen) {
            self.own_seen = Some(seen);
            self.recheck = Some(end);
        }
        // Earlier by more than the jitter of two observations of the same
        // lease (each try's `sent + PTTL` differs by microseconds), so that
        // jitter does not wake every sleeper at every try.
        match (before, self.due()) {
            (Some(b), Some(a)) => a + JITTER < b,
            _ => false,
        }
    }

    /// How long from `now` until a re-check is due (zero if it passed);
    /// `None` when nothing is known.
    pub(crate) fn until_due(&self, now: Instant) -> Option<Duration> {
        self.due().map(|d| d.saturating_duration_since(now))
    }

    /// Claim the probe that is due at `now` (or when nothing is known).
    /// Of the waiters that race here, the first wins and pushes what passed
    /// `slice` ahead, so the others see nothing due until then.
    pub(crate) fn claim_probe(&mut self, now: Instant, slice: Duration) -> bool {
        if self.due().is_some_and(|d| d > now) {
            return false;
        }
        let next = Some(now + slice);
        if self.expiry.is_none_or(|x| x <= now) {
            self.expiry = next;
        }
        if self.recheck.is_none_or(|x| x <= now) {
            self.recheck = next;
        }
        true
    }

    /// How long from `now` until the next poll of a degraded key is due.
    pub(crate) fn until_poll(&self, now: Instant) -> Duration {
        self.poll_at
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now))
    }

    /// Claim the poll of a degraded key due at `now`, scheduling the next
    /// one `every` later.
    pub(crate) fn claim_poll(&mut self, now: Instant, every: Duration) -> bool {
        if self.poll_at.is_some_and(|at| at > now) {
            return false;
        }
        self.poll_at = Some(now + every);
        true
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_newest_observation_describes_the_current_holder() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut e = Estimate::default();
        assert!(!e.observe(t0, ms(10_000), true));
        // A later, shorter lease (another client took over): earlier.
        assert!(e.observe(t0 + ms(100), ms(1_000), false));
        assert_eq!(e.due(), Some(t0 + ms(1_101)));
        // An older observation arriving late changes nothing.
        assert!(!e.observe(t0 + ms(50), ms(100), false));
        assert_eq!(e.due(), Some(t0 + ms(1_101)));
        // A newer, longer lease moves the holder's end later, but the
        // client's own re-check (its own try saw 10 s) stays.
        assert!(!e.observe(t0 + ms(200), ms(30_000), false));
        assert_eq!(e.due(), Some(t0 + ms(10_001)));
    }

    #[test]
    fn one_probe_per_slice() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut e = Estimate::default();
        assert!(e.claim_probe(t0, ms(50)));
        assert!(!e.claim_probe(t0 + ms(10), ms(50)));
        assert!(e.claim_probe(t0 + ms(50), ms(50)));
        e.observe(t0 + ms(60), ms(1_000), true);
        assert!(!e.claim_probe(t0 + ms(500), ms(50)));
        assert!(e.claim_probe(t0 + ms(1_061), ms(50)));
        assert!(e.claim_poll(t0, ms(25)) && !e.claim_poll(t0 + ms(24), ms(25)));
        assert_eq!(e.until_poll(t0 + ms(5)), ms(20));
    }
}
