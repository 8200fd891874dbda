//! [`Holds`]: every lock, permit and read-write hold of one client that a
//! guard still owns, so that [`LockClient::shutdown`](crate::LockClient::shutdown)
//! can release them all, and the watchdog's state of each (one map for
//! both: an acquisition registers once). A guard registers when it is made
//! (see [`Watchdog::register`](crate::watchdog::Watchdog::register)) and
//! deregisters when it releases (or its drop hands the release to the
//! background); the shutdown takes what is left, once, and closes the set:
//! a guard made after that is refused and its hold released at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use fred::bytes_utils::Str;
use metrics::SharedString;
use rapidhash::fast::RandomState;

use crate::scripts::Names;
use crate::watchdog::Lease;

/// What a shutdown needs to release one hold, and what the watchdog needs
/// to look after it.
pub(crate) struct Hold {
    pub(crate) names: Names,
    pub(crate) token: Str,
    pub(crate) fence: u64,
    pub(crate) permits: u32,
    pub(crate) name: Option<SharedString>,
    /// The guard's lease state: closed by the shutdown, so its lost signal
    /// fires and `is_held` turns false.
    pub(crate) lease: Arc<Lease>,
    /// `Some` while the watchdog looks after this hold.
    pub(crate) watch: Option<Watch>,
}

/// The watchdog's state of one hold.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Watch {
    /// Renew it (watchdog lock), or only fire its signal when the lease
    /// runs out (fixed lease somebody listens to).
    pub(crate) renew: bool,
    /// Part of the round in flight.
    pub(crate) in_flight: bool,
    /// After a failed renewal: not before this.
    pub(crate) retry_at: Option<Instant>,
}

impl Watch {
    pub(crate) fn new(renew: bool) -> Self {
        Watch {
            renew,
            in_flight: false,
            retry_at: None,
        }
    }
}

#[derive(Default)]
pub(crate) struct State {
    next: u64,
    /// Set by the shutdown: nothing registers any more.
    closed: bool,
    pub(crate) live: HashMap<u64, Hold, RandomState>,
}

impl State {
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
    state: Mutex<State>,
}

impl Holds {
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics under this lock; a poisoned one is still consistent.
        crate::sync::lock(&self.state)
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
