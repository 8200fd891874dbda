//! [`HoldId`]: the four values that name one hold in Redis, which travel
//! together from the acquisition through the guard, the client's holds and
//! the watchdog to the release.

use fred::bytes_utils::Str;

use crate::scripts::Names;

/// One hold, as Redis knows it.
#[derive(Clone, Debug)]
pub(crate) struct HoldId {
    /// The Redis names of the key the hold is on.
    pub(crate) names: Names,
    /// The acquisition's token (the client's id, `-`, 16 random hex digits).
    pub(crate) token: Str,
    /// The fencing token the acquire script returned; `None` for an
    /// acquisition whose reply never arrived (the release script then reads
    /// it from the value, and voids the token should it come later).
    pub(crate) fence: Option<u64>,
    /// Permits held: 1 for a lock.
    pub(crate) permits: u32,
}

impl HoldId {
    /// A hold whose acquire reply said `fence`.
    pub(crate) fn held(names: Names, token: Str, fence: u64, permits: u32) -> Self {
        HoldId {
            names,
            token,
            fence: Some(fence),
            permits,
        }
    }

    /// Move the hold out, leaving a placeholder that names nothing (for a
    /// guard's drop, which hands its hold to a background release).
    pub(crate) fn take(&mut self) -> Self {
        HoldId {
            names: std::mem::replace(&mut self.names, Names::taken()),
            token: std::mem::take(&mut self.token),
            fence: self.fence,
            permits: self.permits,
        }
    }
}
