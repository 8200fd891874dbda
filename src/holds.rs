//! [`Holds`]: every lock, permit and read-write hold of one client that a
//! guard still owns, so that [`LockClient::shutdown`](crate::LockClient::shutdown)
//! can release them all. A guard registers when it is made and deregisters
//! when it releases (or its drop hands the release to the background); the
//! shutdown takes what is left, once, and closes the set: a guard made
//! after that is refused and its hold released at once.

use std::collections::HashMap;

use rapidhash::fast::RandomState;
use std::sync::{Arc, Mutex, MutexGuard};

use fred::bytes_utils::Str;
use metrics::SharedString;

use crate::scripts::Names;
use crate::watchdog::Lease;

/// What a shutdown needs to release one hold.
pub(crate) struct Hold {
    pub(crate) names: Names,
    pub(crate) token: Str,
    pub(crate) fence: u64,
    pub(crate) permits: u32,
    pub(crate) name: Option<SharedString>,
    /// The guard's lease state: closed by the shutdown, so its lost signal
    /// fires and `is_held` turns false.
    pub(crate) lease: Arc<Lease>,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Set by the shutdown: nothing registers any more.
    closed: bool,
    live: HashMap<u64, Hold, RandomState>,
}

/// The holds of one client, by id.
#[derive(Default)]
pub(crate) struct Holds {
    state: Mutex<State>,
}

impl Holds {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics under this lock; a poisoned one is still consistent.
        crate::sync::lock(&self.state)
    }

    /// Register a hold; `None` once the client is shut down (the caller
    /// releases the hold itself).
    pub(crate) fn insert(&self, hold: Hold) -> Option<u64> {
        let mut s = self.state();
        if s.closed {
            return None;
        }
        s.next += 1;
        let id = s.next;
        s.live.insert(id, hold);
        Some(id)
    }

    /// Deregister hold `id`: `true` if it was registered, so the caller
    /// owns its release; `false` when the shutdown took it.
    pub(crate) fn remove(&self, id: u64) -> bool {
        self.state().live.remove(&id).is_some()
    }

    /// Close the set and take every hold still registered.
    pub(crate) fn close(&self) -> Vec<Hold> {
        let mut s = self.state();
        s.closed = true;
        s.live.drain().map(|(_, h)| h).collect()
    }
}
