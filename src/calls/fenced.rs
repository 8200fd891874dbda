//! Which locks may take the fast path ([`Calls::acquire_fast`]): those
//! whose record this client saw a script fence on its current command
//! connection.
//!
//! A fast-path fence is the record's counter plus one, with no clock in it.
//! After a failover, the promoted replica's counter can lag the fences the
//! old primary issued last (replication is asynchronous), and so can a
//! server a client still reaches after it was demoted. A script's fence is
//! at least the server's clock (`scripts/fence.lua`), which carries it past
//! every fence of the other server as protocol 3's were. So the first
//! acquisition of a lock on each connection is the acquire script: reaching
//! another server takes a new connection, and every client's first fence
//! there comes from the clock; later fast-path fences only count up from it.
//!
//! A mark lasts [`MARK_LIFETIME`] (60 s): a split brain (an old primary
//! still taking locks for the clients that have not left it, after the
//! promotion) can give a script's fence there above the counter here; the
//! next script acquisition here, at most a minute later, is above it again,
//! and the fast path counts up from that.
//!
//! A lock is marked only when a call's first try took it (it was free), and
//! forgotten when the fast path finds it taken: on a contended lock the
//! first try is the script, which queues the caller in the same call,
//! rather than a refused `MULTI` and then the script.
//!
//! The generation counts the command connection's reconnects (fred
//! announces a new connection before it writes any command on it). A lock
//! is marked with the generation read before its script was sent, so a
//! reconnect during the call leaves it unmarked. Forgetting is always safe
//! (the script runs again): the set is cleared when it grows past
//! [`MAX_MARKED`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use fred::bytes_utils::Str;
use fred::clients::Client;
use fred::interfaces::EventInterface;
use fred::types::config::Server;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::broadcast::Receiver;

/// Most locks remembered at once.
pub(crate) const MAX_MARKED: usize = 65_536;

/// How long a mark is honoured: the fast path's fences count up from a
/// script's, made at most this long before by the server's clock.
pub(crate) const MARK_LIFETIME: Duration = Duration::from_secs(60);

/// The locks fenced by a script on the current connection (see the module).
pub(crate) struct Fenced {
    reconnects: Mutex<Receiver<Server>>,
    generation: AtomicU64,
    marked: DashMap<Str, (u64, Instant), rapidhash::fast::RandomState>,
}

impl std::fmt::Debug for Fenced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fenced")
            .field("generation", &self.generation)
            .field("marked", &self.marked.len())
            .finish_non_exhaustive()
    }
}

impl Fenced {
    /// Watching `client`'s reconnects from now on.
    pub(crate) fn new(client: &Client) -> Self {
        Fenced {
            reconnects: Mutex::new(client.reconnect_rx()),
            generation: AtomicU64::new(0),
            marked: DashMap::default(),
        }
    }

    /// The current generation: one more for every reconnect announced
    /// since the last look (a missed announcement counts as one).
    pub(crate) fn generation(&self) -> u64 {
        let mut rx = crate::state::sync::lock(&self.reconnects);
        loop {
            match rx.try_recv() {
                Err(TryRecvError::Empty) => break,
                Ok(_) | Err(TryRecvError::Lagged(_)) => {
                    self.generation.fetch_add(1, Ordering::SeqCst);
                }
                Err(TryRecvError::Closed) => {
                    // The client quit: nothing is fast any more.
                    self.generation.fetch_add(1, Ordering::SeqCst);
                    break;
                }
            }
        }
        self.generation.load(Ordering::SeqCst)
    }

    /// Whether `lock` was fenced by a script in `generation`, within the
    /// last [`MARK_LIFETIME`].
    pub(crate) fn holds(&self, lock: &Str, generation: u64) -> bool {
        self.marked
            .get(lock)
            .is_some_and(|m| m.0 == generation && m.1.elapsed() < MARK_LIFETIME)
    }

    /// `lock` was found taken by the fast path's `SET NX`: contended, so
    /// the next acquisition starts with the script, which queues a caller
    /// at once.
    pub(crate) fn forget(&self, lock: &Str) {
        self.marked.remove(lock);
    }

    /// `lock` was fenced by a script sent in `generation`.
    pub(crate) fn mark(&self, lock: &Str, generation: u64) {
        if self.marked.len() >= MAX_MARKED {
            self.marked.clear();
        }
        self.marked
            .insert(lock.clone(), (generation, Instant::now()));
    }
}
