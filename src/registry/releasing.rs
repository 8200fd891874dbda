//! [`Releasing`]: one release's business with the registry, from before its
//! script is sent until its outcome is known (or the release is abandoned).
//!
//! The releasing client serves its own local waiters: no message tells them
//! (a release script publishes only to another client it reserves for). So
//! the handle decides, from the script's outcome, which local waiters wake:
//!
//! * a lock released with a local waiter claimed for a direct hand-over
//!   (`crate::state::handoff`) resolves that claim: the waiter gets the lock
//!   with its fence, re-checks, or goes back to sleep; if it left, one other
//!   local waiter wakes instead when the lock may be free;
//! * a lock released without such a claim wakes one local waiter, if any
//!   waits, when the lock is free, when the release had already run (a
//!   replay whose first reply was lost), or when the outcome is unknown;
//! * a semaphore's release wakes at most one local waiter per permit it
//!   freed (one writer for a write), none when clients ahead of this one
//!   wait;
//! * a stand-by (this client queued first behind a reservation for another
//!   client, or permits reserved for this client) arms the grace probe, as a
//!   message would.
//!
//! While the handle lives, a requeue is in flight: the last local waiter to
//! leave does not take the client out of the queue (see [`Requeue`]).

use std::sync::Arc;
use std::time::Instant;

use fred::bytes_utils::Str;
use tokio::sync::Notify;

use super::{Registry, Requeue};
use crate::calls::{HandOver, Released};
use crate::scripts::Kind;
use crate::state::handoff::{Claim, Inbox, Orphan};

/// A release in flight, as the registry sees it.
pub(crate) struct Releasing {
    registry: Arc<Registry>,
    channel: Str,
    /// `Some` when local tasks still wait: the script queues this client
    /// again, and this lives until its outcome is known.
    requeue: Option<Requeue>,
    /// The local waiter a lock release may give the lock to directly.
    claim: Option<Claim<Notify>>,
    /// Other local tasks wait besides the claimed one: the client stays
    /// queued after the hand-over.
    keep: bool,
}

/// A local waiter that a release claimed and that left before the outcome
/// was known: the caller releases what it may have been given.
pub(crate) struct Abandoned {
    /// The waiter's token.
    pub(crate) token: Str,
    /// What it may hold.
    pub(crate) orphan: Orphan,
}

impl Registry {
    /// A release script of this client is about to be sent for `channel`.
    /// `closing`: the client is shutting down and its local waiters are
    /// leaving (no requeue, no hand-over, which would make a new hold).
    /// `hand_over`: a lock release whose fence is known may give the lock
    /// to the oldest local waiter that offered to take it.
    pub(crate) fn begin_release(
        self: &Arc<Self>,
        channel: &Str,
        closing: bool,
        hand_over: bool,
    ) -> Releasing {
        let requeue = if closing { None } else { self.requeue(channel) };
        let claimed = if closing || !hand_over {
            None
        } else {
            self.claim(channel)
        };
        let (claim, keep) = match claimed {
            Some((claim, others)) => (Some(claim), others),
            None => (None, false),
        };
        Releasing {
            registry: Arc::clone(self),
            channel: channel.clone(),
            requeue,
            claim,
            keep,
        }
    }

    /// Claim the oldest local waiter of `channel` that a release may hand
    /// the lock to directly, and say whether other local tasks are
    /// registered for it too (read in the same lookup).
    fn claim(&self, channel: &str) -> Option<(Claim<Notify>, bool)> {
        let entry = self.map.get(channel)?;
        let claim = Inbox::claim(&entry.inbox)?;
        Some((claim, entry.presence.count() > 1))
    }
}

impl Releasing {
    /// Whether the script should queue this client again.
    pub(crate) fn requeued(&self) -> bool {
        self.requeue.is_some()
    }

    /// For a semaphore's requeue: the largest need of a local waiter now,
    /// with its limit (see [`Requeue::need`]).
    pub(crate) fn need(&self) -> Option<(u32, u32)> {
        self.requeue.as_ref().and_then(Requeue::need)
    }

    /// The claimed local waiter, for the release script to name.
    pub(crate) fn next(&self) -> Option<HandOver<'_>> {
        self.claim.as_ref().map(|c| HandOver {
            token: c.token(),
            lease_ms: c.lease_ms(),
            keep: self.keep,
        })
    }

    /// A lock release ended: `outcome` is `None` when unknown (an error: it
    /// may have run), `standby` says this client is queued first behind a
    /// reservation for another client, `sent` is when the script was sent
    /// (the claimed waiter's lease starts no later). Returns the claimed
    /// waiter if it left meanwhile, for the caller to release what it may
    /// hold.
    pub(crate) fn finish_lock(
        &mut self,
        outcome: Option<Released>,
        standby: bool,
        sent: Instant,
    ) -> Option<Abandoned> {
        if standby {
            // Should the other client not take it, it lapses, and a probe
            // after the grace takes it.
            self.registry.reserved_here(&self.channel);
        }
        let may_be_free = matches!(outcome, Some(Released::Freed | Released::Already) | None);
        let Some(c) = self.claim.take() else {
            // Also without a requeue: a local waiter may have arrived since,
            // and its try, run before the release, queued this client.
            if may_be_free {
                self.registry.wake_one_if_waiting(&self.channel);
            }
            return None;
        };
        let token = Str::from(c.token());
        let orphan = match outcome {
            Some(Released::Granted(f)) => c.granted(f, sent),
            Some(Released::HandedOver) => c.not_granted(false),
            Some(Released::Freed | Released::NotOurs) => c.not_granted(true),
            // A replay: the first run may have given the lock to the
            // waiter (whose reply was lost), so this counts as unknown.
            Some(Released::Already) | None => c.unknown(),
        };
        // The claimed waiter left: the wake-up it would have passed on goes
        // to another local waiter, by the rule without a claim (not after a
        // reservation for another client, nor a loss).
        if may_be_free && matches!(orphan, Orphan::Left | Orphan::Unknown) {
            self.registry.wake_one_if_waiting(&self.channel);
        }
        Some(Abandoned { token, orphan })
    }

    /// A semaphore release ended: `outcome` is `None` when unknown, else
    /// how many local waiters the script says to wake and whether it
    /// reserved permits for this client. `permits` were released, by a
    /// hold of `kind`.
    pub(crate) fn finish_permits(
        &mut self,
        outcome: Option<(u32, bool)>,
        permits: u32,
        kind: Kind,
    ) {
        let wake = match outcome {
            Some((wake, _)) => wake.min(permits.max(1)),
            None => permits.max(1),
        };
        // No more than wait here (a write frees a billion permits), and one
        // writer: a write reservation serves one.
        let mut wake = wake as usize;
        if kind == Kind::Write {
            wake = wake.min(1);
        }
        self.registry.wake_up_to(&self.channel, wake);
        if matches!(outcome, Some((_, true))) {
            // Reserved for this client: should no woken waiter take it, it
            // lapses, and a probe after the grace hands it on.
            self.registry.reserved_here(&self.channel);
        }
    }

    /// The release was dropped before its reply: a claimed waiter
    /// re-checks (the acquire script finds a lock granted to its token).
    /// Returns it if it left too, for the caller to release its token as
    /// an abandoned acquisition.
    pub(crate) fn abandon(&mut self) -> Option<Abandoned> {
        let c = self.claim.take()?;
        let token = Str::from(c.token());
        let orphan = c.unknown();
        if orphan == Orphan::Unknown {
            // As for an unknown outcome: the waiter that left would have
            // passed its wake-up on.
            self.registry.wake_one_if_waiting(&self.channel);
        }
        Some(Abandoned { token, orphan })
    }
}
