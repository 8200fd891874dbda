//! The rate limit of [`Calls::value_vanished`](super::Calls::value_vanished):
//! each name told at most once a second, and a bounded number of calls in
//! flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;

/// Most [`WAKE`](crate::scripts::WAKE) calls a client has in flight.
pub(crate) const MAX_WAKES: usize = 4;

/// What [`Calls::value_vanished`] sent lately: each name at most once a
/// second, [`MAX_WAKES`] at a time.
#[derive(Default)]
pub(crate) struct Vanished {
    /// Name -> when it was last told; pruned of entries over a second old
    /// when it grows past 64, and never over 1,024.
    recent: std::sync::Mutex<std::collections::HashMap<Str, Instant>>,
    in_flight: AtomicUsize,
}

/// A [`WAKE`](crate::scripts::WAKE) call's place among the [`MAX_WAKES`].
pub(crate) struct WakeSlot(Arc<Vanished>);

impl Drop for WakeSlot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Vanished {
    const AGAIN: Duration = Duration::from_secs(1);

    /// A place for a call about `name`, or `None` when it was told within
    /// the last second or [`MAX_WAKES`] calls are in flight.
    pub(crate) fn admit(self: &Arc<Self>, name: &Str) -> Option<WakeSlot> {
        let now = Instant::now();
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent
                .get(name)
                .is_some_and(|at| now.duration_since(*at) < Self::AGAIN)
            {
                return None;
            }
            if recent.len() >= 64 {
                recent.retain(|_, at| now.duration_since(*at) < Self::AGAIN);
            }
            if recent.len() >= 1024 {
                return None;
            }
            recent.insert(name.clone(), now);
        }
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_WAKES {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(WakeSlot(Arc::clone(self)))
    }
}
