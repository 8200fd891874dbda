//! One hold and what shares it. [`Lease`]: what a guard, the watchdog and
//! the shutdown know of one hold's lease, and its lost-lock signal.
//!
//! [`Holds`]: every lock, permit and read-write hold of one client that a
//! guard still owns, so that [`LockClient::shutdown`](crate::LockClient::shutdown)
//! can release them all, and the watchdog's state of each (one map for
//! both: an acquisition registers once). A guard registers when it is made
//! (see [`Watchdog::register`](crate::watchdog::Watchdog::register)) and
//! deregisters when it releases (or its drop hands the release to the
//! background); the shutdown takes what is left, once, and closes the set:
//! a guard made after that is refused and its hold released at once.

use std::collections::HashMap;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use metrics::SharedString;
use rapidhash::fast::RandomState;
use tokio_util::sync::CancellationToken;

use crate::hold_id::HoldId;
use crate::state::lease::{LeaseRecord, LeaseState};

/// What a guard and the watchdog share about one lock: the lease record
/// and the lost-lock signal.
pub(crate) struct Lease {
    record: LeaseRecord,
    /// Cancelled when the lock is known lost, or when its guard is released
    /// or dropped. Made by the first caller that asks for it (`lost()`,
    /// `lost_token()`): most guards never do, and a token costs an
    /// allocation and, when dropped, its lock.
    signal: OnceLock<CancellationToken>,
    /// The guard was released or dropped (or the shutdown took its hold).
    closed: AtomicBool,
}

impl Lease {
    pub(crate) fn new(sent: Instant, lease: Duration) -> Arc<Self> {
        Arc::new(Lease {
            record: LeaseRecord::new(sent, lease),
            signal: OnceLock::new(),
            closed: AtomicBool::new(false),
        })
    }

    /// The lease record (extend, renewal and their generations).
    pub(crate) fn record(&self) -> &LeaseRecord {
        &self.record
    }

    pub(crate) fn state(&self) -> LeaseState {
        self.record.snapshot()
    }

    /// Until when the lock is certainly still ours, by this process's clock.
    pub(crate) fn safe_until(&self) -> Instant {
        self.record.safe_until()
    }

    /// Held as far as this process knows, without a round trip.
    pub(crate) fn is_held(&self) -> bool {
        !self.record.is_lost()
            && !self.closed.load(Ordering::SeqCst)
            && Instant::now() < self.safe_until()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.record.is_lost()
    }

    /// The lock is known lost: run `first` (count and log it) if nobody
    /// found it before, whoever finds it (watchdog, extend, release), then
    /// fire the signal, so that whoever the signal wakes sees the count.
    /// Returns whether this call was the first.
    pub(crate) fn mark_lost(&self, first: impl FnOnce()) -> bool {
        let is_first = self.record.set_lost();
        if is_first {
            first();
        }
        self.fire();
        is_first
    }

    /// The guard is gone (released, dropped, or its hold taken by the
    /// shutdown): fire the signal.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.fire();
    }

    /// Cancel the signal if one was made. The fence pairs with the one in
    /// [`signal`](Self::signal): of a loss or close and a signal made at
    /// the same time, one side sees the other, so the signal fires.
    fn fire(&self) {
        fence(Ordering::SeqCst);
        if let Some(signal) = self.signal.get() {
            signal.cancel();
        }
    }

    /// The lost-lock signal: cancelled once the lock is known lost or the
    /// guard is gone (at once, for a signal asked for after that).
    pub(crate) fn signal(&self) -> &CancellationToken {
        let signal = self.signal.get_or_init(CancellationToken::new);
        fence(Ordering::SeqCst);
        if self.record.is_lost() || self.closed.load(Ordering::SeqCst) {
            signal.cancel();
        }
        signal
    }
}

/// What a shutdown needs to release one hold, and what the watchdog needs
/// to look after it.
pub(crate) struct Hold {
    /// Its `fence` is `Some`: a hold is registered by its guard.
    pub(crate) id: HoldId,
    pub(crate) name: Option<SharedString>,
    /// The guard's lease state: closed by the shutdown, so its lost signal
    /// fires and `is_held` turns false.
    pub(crate) lease: Arc<Lease>,
    /// `Some` while the watchdog looks after this hold.
    pub(crate) watch: Option<Watched>,
}

/// The watchdog's state of one hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Watched {
    /// Renew it (watchdog lock), or only fire its signal when the lease
    /// runs out (fixed lease somebody listens to).
    pub(crate) renew: bool,
    /// Part of the round in flight.
    pub(crate) in_flight: bool,
    /// After a failed renewal: not before this.
    pub(crate) retry_at: Option<Instant>,
}

impl Watched {
    pub(crate) fn new(renew: bool) -> Self {
        Watched {
            renew,
            in_flight: false,
            retry_at: None,
        }
    }
}

#[derive(Default)]
pub(crate) struct HoldSet {
    next: u64,
    /// Set by the shutdown: nothing registers any more.
    closed: bool,
    pub(crate) live: HashMap<u64, Hold, RandomState>,
}

impl HoldSet {
    /// Register a hold; `None` once the client is shut down (the caller
    /// releases the hold itself).
    pub(crate) fn insert(&mut self, hold: Hold) -> Option<u64> {
        if self.closed {
            return None;
        }
        self.next += 1;
        let id = self.next;
        self.live.insert(id, hold);
        Some(id)
    }
}

/// The holds of one client, by id.
#[derive(Default)]
pub(crate) struct Holds {
    state: Mutex<HoldSet>,
}

impl Holds {
    pub(crate) fn state(&self) -> MutexGuard<'_, HoldSet> {
        // Nothing panics under this lock; a poisoned one is still consistent.
        crate::state::sync::lock(&self.state)
    }

    /// Deregister hold `id` (the watchdog no longer looks after it): `true`
    /// if it was registered, so the caller owns its release; `false` when
    /// the shutdown took it.
    pub(crate) fn remove(&self, id: u64) -> bool {
        self.state().live.remove(&id).is_some()
    }

    /// Close the set and take every hold still registered (the watchdog no
    /// longer looks after them).
    pub(crate) fn close(&self) -> Vec<Hold> {
        let mut s = self.state();
        s.closed = true;
        s.live.drain().map(|(_, h)| h).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_is_counted_once_and_closing_is_not_a_loss() {
        let l = Lease::new(Instant::now(), Duration::from_secs(10));
        assert!(l.is_held());
        l.close();
        assert!(!l.is_held() && !l.is_lost());
        let l = Lease::new(Instant::now(), Duration::from_secs(10));
        let mut counted = 0;
        assert!(l.mark_lost(|| counted += 1));
        assert!(!l.mark_lost(|| counted += 1));
        assert_eq!(counted, 1);
        assert!(l.signal().is_cancelled() && !l.is_held());
    }

    /// The signal is made on demand: one made before a loss or a close
    /// fires with it, one asked for after is already fired, and a held
    /// lock's is not; across threads racing the two, it always fires.
    #[test]
    fn the_signal_fires_whenever_it_was_made() {
        let l = Lease::new(Instant::now(), Duration::from_secs(10));
        let early = l.signal().clone();
        assert!(!early.is_cancelled());
        l.close();
        assert!(early.is_cancelled() && l.signal().is_cancelled());
        let l = Lease::new(Instant::now(), Duration::from_secs(10));
        let early = l.signal().clone();
        l.mark_lost(|| {});
        assert!(early.is_cancelled());
        for round in 0..2_000 {
            let l = Lease::new(Instant::now(), Duration::from_secs(10));
            let ender = {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    if round % 2 == 0 {
                        l.close();
                    } else {
                        l.mark_lost(|| {});
                    }
                })
            };
            let signal = l.signal().clone();
            ender.join().unwrap();
            assert!(
                signal.is_cancelled(),
                "round {round}: the signal never fired"
            );
        }
    }
}
