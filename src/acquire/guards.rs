//! The clean-up guards of a lock call's await points: whatever future is
//! dropped, or unwinds, at one of them leaves no hold and no claim behind.

use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use tokio::sync::Notify;

use super::{lease_began, LockCall};
use crate::release::release_orphan;
use crate::state::handoff::{Claim, Offer, Orphan};

/// Runs its action when dropped, unless disarmed first: the clean-up of an
/// await point that the future may be dropped at.
pub(super) struct OnDrop<F: FnOnce()>(pub(super) Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    pub(super) fn disarm(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(action) = self.0.take() {
            action();
        }
    }
}

/// The other local readers' offers a reader's acquire claimed (see
/// `crate::state::handoff`): each gets its fence from the reply, or stays waiting
/// when it was not admitted; the rest, if the call failed or was dropped,
/// re-check (an admitted token finds its hold), and one whose reader left
/// is released in the background.
pub(super) struct ReadBatch<'c, 'a> {
    pub(super) claims: Vec<Claim<Notify>>,
    pub(super) call: &'c LockCall<'a>,
}

impl ReadBatch<'_, '_> {
    /// The reply's word on each claimed reader: its fence and the hold's
    /// remaining lease (see [`TryReply::batch`](crate::calls::TryReply::batch)), or not admitted.
    pub(super) fn resolve(&mut self, fences: &[Option<(u64, Duration)>], sent: Instant) {
        for (i, claim) in self.claims.drain(..).enumerate() {
            let token = Str::from(claim.token());
            let orphan = match fences.get(i) {
                Some(&Some((fence, left))) => {
                    // A hold the token already had started before this
                    // call: its lease is counted from when it ends,
                    // backwards.
                    let lease = Duration::from_millis(claim.lease_ms());
                    claim.granted(fence, lease_began(sent, lease, left))
                }
                _ => claim.not_granted(false),
            };
            release_orphan(self.call.inner, &self.call.names, token, orphan);
        }
    }
}

impl Drop for ReadBatch<'_, '_> {
    fn drop(&mut self) {
        for claim in self.claims.drain(..) {
            let token = Str::from(claim.token());
            let orphan = claim.unknown();
            release_orphan(self.call.inner, &self.call.names, token, orphan);
        }
    }
}

/// A waiting call's offer to take the lock directly from a release of this
/// client. Dropped (the call returns or is dropped), it withdraws the offer,
/// and releases in the background a lock granted to it that it never took,
/// or its token as an abandoned acquisition after a hand-over whose outcome
/// stayed unknown.
pub(super) struct Offered<'c, 'a> {
    pub(super) offer: Offer<Notify>,
    pub(super) call: &'c LockCall<'a>,
}

impl Drop for Offered<'_, '_> {
    fn drop(&mut self) {
        let orphan = self.offer.leave();
        if orphan != Orphan::None {
            release_orphan(
                self.call.inner,
                &self.call.names,
                self.call.token.clone(),
                orphan,
            );
        }
    }
}
