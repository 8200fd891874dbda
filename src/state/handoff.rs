//! [`Inbox`]: the local waiters a release may hand a lock to directly.
//!
//! A waiting lock call offers a [`Slot`] with its token and lease. A release
//! by the same client claims the oldest open slot and asks the release
//! script to give the lock to that token at once (see
//! the release script, `RELEASE`): the hand-over within one process
//! then costs one request, the release itself, instead of a release and an
//! acquire.
//!
//! Pure state, no I/O; the wake-up is the `W` the slot carries (a tokio
//! `Notify` in the library, a flag in the loom models of `relaylock-loom`).
//!
//! # The slot's states
//!
//! ```text
//!   Open --claim--> Claimed --granted--> Granted --taken by the waiter--> Gone
//!    ^  \             |  \                  \--waiter left: it releases the lock
//!    |   try         settled  waiter left
//!    |    v           v        v
//!    +- Trying     Open|Recheck  Abandoned --claim resolved: the claimer cleans up--> Gone
//! ```
//!
//! # Guarantees
//!
//! * A slot is claimed by at most one release at a time, and never while its
//!   own acquire is in flight (`Trying`).
//! * A lock granted to a slot's token always ends with exactly one owner of
//!   the clean-up: the waiter takes it, or, when the waiter left, whoever
//!   sees the departure second (the waiter for a grant it finds, the claimer
//!   for a grant or an unknown outcome it resolves) releases it.
//! * A claim that ends without a grant it knows of (an error, a replay, a
//!   dropped release) sends the waiter to re-check: the acquire script is
//!   idempotent for its own token, so a grant that did happen is found.

use std::collections::VecDeque;
use std::time::Instant;

use super::sync::{self, Arc, AtomicBool, AtomicUsize, Mutex, Ordering::SeqCst};

/// How a slot's waiter is woken when its claim is resolved.
pub(crate) trait Wake {
    /// Wake the waiter, or let its next wait return at once.
    fn wake(&self);
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Open,
    Trying,
    Claimed,
    Granted { fence: u64, sent: Instant },
    Recheck,
    Abandoned,
    Gone,
}

/// One waiting lock call's offer to take the lock directly from a release.
#[derive(Debug)]
pub(crate) struct Slot<W> {
    token: String,
    lease_ms: u64,
    state: Mutex<SlotState>,
    /// A claim on this slot ended with an unknown outcome: the lock may be
    /// held by this token (or be given to it by a delayed release). Read and
    /// written under `state`'s lock.
    doubt: AtomicBool,
    wake: W,
}

/// The slots of one key, oldest first.
#[derive(Debug)]
pub(crate) struct Inbox<W> {
    slots: Mutex<VecDeque<Arc<Slot<W>>>>,
    /// Slots that left but may still be in `slots`.
    gone: AtomicUsize,
}

impl<W> Default for Inbox<W> {
    fn default() -> Self {
        Inbox {
            slots: Mutex::new(VecDeque::new()),
            gone: AtomicUsize::new(0),
        }
    }
}

impl<W: Wake> Inbox<W> {
    /// Offer a slot for `token` (whose lease would be `lease_ms`), at the
    /// back of the line.
    pub(crate) fn offer(inbox: &Arc<Self>, token: &str, lease_ms: u64, wake: W) -> Offer<W> {
        let slot = Arc::new(Slot {
            token: token.to_owned(),
            lease_ms,
            state: Mutex::new(SlotState::Open),
            doubt: AtomicBool::new(false),
            wake,
        });
        let mut slots = sync::lock(&inbox.slots);
        inbox.compact(&mut slots);
        slots.push_back(Arc::clone(&slot));
        Offer {
            inbox: Arc::clone(inbox),
            slot,
        }
    }

    /// Claim the oldest open slot, if any.
    pub(crate) fn claim(inbox: &Arc<Self>) -> Option<Claim<W>> {
        let mut slots = sync::lock(&inbox.slots);
        inbox.compact(&mut slots);
        slots.iter().find_map(|slot| {
            let mut state = sync::lock(&slot.state);
            let was_recheck = *state == SlotState::Recheck;
            (*state == SlotState::Open || was_recheck).then(|| {
                *state = SlotState::Claimed;
                Claim {
                    inbox: Arc::clone(inbox),
                    slot: Some(Arc::clone(slot)),
                    was_recheck,
                }
            })
        })
    }

    /// Drop the slots that left, once they are at least half of the line:
    /// amortised O(1) per slot, and the line never holds more than twice
    /// its live slots.
    fn compact(&self, slots: &mut VecDeque<Arc<Slot<W>>>) {
        let gone = self.gone.load(SeqCst);
        if gone > 0 && gone * 2 >= slots.len() {
            let before = slots.len();
            slots.retain(|s| *sync::lock(&s.state) != SlotState::Gone);
            let removed = before - slots.len();
            self.gone.fetch_sub(removed, SeqCst);
        }
    }

    /// How many slots the line holds (live or not yet compacted away).
    #[cfg(any(test, loom))]
    pub(crate) fn len(&self) -> usize {
        sync::lock(&self.slots).len()
    }
}

impl<W> Slot<W> {
    fn set_gone(state: &mut SlotState, inbox: &Inbox<W>) {
        // Counted first: a compaction that sees the slot gone (under this
        // lock) also sees it counted.
        inbox.gone.fetch_add(1, SeqCst);
        *state = SlotState::Gone;
    }
}

/// A waiting lock call's slot. Dropping it withdraws the offer.
#[derive(Debug)]
pub(crate) struct Offer<W> {
    inbox: Arc<Inbox<W>>,
    slot: Arc<Slot<W>>,
}

/// What a waiter may do about its own try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    /// Try: nothing is in flight for this slot.
    Go,
    /// A release is handing the lock to this slot: wait for its outcome.
    Claimed,
    /// The lock is this waiter's: fencing token, and when the release that
    /// granted it was sent (its lease counts from then).
    Granted(u64, Instant),
}

/// What a resolved claim told the waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handed {
    /// Nothing yet (a spurious wake-up).
    Pending,
    /// No grant is known: try (the acquire script finds a grant that did
    /// happen).
    Recheck,
    /// The lock is this waiter's (as in [`Gate::Granted`]).
    Granted(u64, Instant),
}

impl<W: Wake> Offer<W> {
    /// The waiter wants to run its own acquire.
    pub(crate) fn begin_try(&self) -> Gate {
        let mut state = sync::lock(&self.slot.state);
        match *state {
            SlotState::Claimed => Gate::Claimed,
            SlotState::Granted { fence, sent } => {
                Slot::set_gone(&mut state, &self.inbox);
                Gate::Granted(fence, sent)
            }
            _ => {
                *state = SlotState::Trying;
                Gate::Go
            }
        }
    }

    /// The waiter's own acquire ended (and did not take the lock).
    pub(crate) fn end_try(&self) {
        let mut state = sync::lock(&self.slot.state);
        if *state == SlotState::Trying {
            *state = SlotState::Open;
        }
    }

    /// After a wake-up: what the claim, if one was resolved, says.
    pub(crate) fn outcome(&self) -> Handed {
        let mut state = sync::lock(&self.slot.state);
        match *state {
            SlotState::Granted { fence, sent } => {
                Slot::set_gone(&mut state, &self.inbox);
                Handed::Granted(fence, sent)
            }
            SlotState::Recheck => {
                *state = SlotState::Open;
                Handed::Recheck
            }
            _ => Handed::Pending,
        }
    }

    /// Whether a release's claim on this slot is in flight.
    pub(crate) fn is_claimed(&self) -> bool {
        *sync::lock(&self.slot.state) == SlotState::Claimed
    }

    /// The wake-up this slot's claims use.
    pub(crate) fn waker(&self) -> &W {
        &self.slot.wake
    }

    /// The waiter took the lock with its own try: withdraw the offer, with
    /// nothing to clean up.
    pub(crate) fn acquired(&self) {
        let mut state = sync::lock(&self.slot.state);
        self.slot.doubt.store(false, SeqCst);
        if *state != SlotState::Gone {
            Slot::set_gone(&mut state, &self.inbox);
        }
    }
}

impl<W> Offer<W> {
    /// Withdraw the offer (idempotent; dropping the offer does it too).
    /// Returns what the caller must release: a lock granted to this slot
    /// that the waiter never took, or this token as an abandoned
    /// acquisition when an earlier claim's outcome stayed unknown. A claim
    /// still in flight is left to its claimer to clean up.
    pub(crate) fn leave(&self) -> Orphan {
        let mut state = sync::lock(&self.slot.state);
        match *state {
            SlotState::Gone | SlotState::Abandoned => Orphan::None,
            SlotState::Claimed => {
                *state = SlotState::Abandoned;
                Orphan::None
            }
            SlotState::Granted { fence, .. } => {
                Slot::set_gone(&mut state, &self.inbox);
                Orphan::Held(fence)
            }
            SlotState::Open | SlotState::Trying | SlotState::Recheck => {
                Slot::set_gone(&mut state, &self.inbox);
                if self.slot.doubt.load(SeqCst) {
                    Orphan::Unknown
                } else {
                    Orphan::None
                }
            }
        }
    }
}

impl<W> Drop for Offer<W> {
    fn drop(&mut self) {
        // The library calls `leave` first and releases what it reports;
        // here a grant would stay held until its lease ends.
        let _ = self.leave();
    }
}

/// A release's claim on one slot: it hands the lock to [`Claim::token`].
/// Dropped unresolved (the release future was dropped), it counts as an
/// unknown outcome: the waiter re-checks.
#[derive(Debug)]
pub(crate) struct Claim<W: Wake> {
    inbox: Arc<Inbox<W>>,
    slot: Option<Arc<Slot<W>>>,
    /// The slot was waiting to re-check when claimed: a claim that ends
    /// without a grant sends it back to re-check, never to plain waiting
    /// (its token may hold the lock after an earlier unknown outcome).
    was_recheck: bool,
}

/// What must be cleaned up when a claim is resolved or a slot left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Orphan {
    /// Nothing.
    None,
    /// The waiter left, and there is nothing of its to release (a claim
    /// that certainly did not grant). Its departure may leave the other
    /// local waiters without the wake-up it would have passed on.
    Left,
    /// The lock was granted to the slot's token, with this fencing token,
    /// and the waiter left without it: release it.
    Held(u64),
    /// The waiter left and whether the lock was (or will be) granted to its
    /// token is unknown: release the token as an abandoned acquisition (its
    /// void marker also stops a delayed release from granting it).
    Unknown,
}

impl<W: Wake> Claim<W> {
    fn slot(&self) -> &Slot<W> {
        self.slot
            .as_ref()
            .expect("an unresolved claim has its slot")
    }

    /// The token the lock is handed to.
    pub(crate) fn token(&self) -> &str {
        &self.slot().token
    }

    /// The lease the waiter asked for, in ms.
    pub(crate) fn lease_ms(&self) -> u64 {
        self.slot().lease_ms
    }

    /// The release gave the lock to the slot's token.
    pub(crate) fn granted(mut self, fence: u64, sent: Instant) -> Orphan {
        let slot = self.slot.take().expect("resolved once");
        resolve(
            &self.inbox,
            &slot,
            SlotState::Granted { fence, sent },
            false,
            |_| Orphan::Held(fence),
        )
    }

    /// The release did not give the lock to the slot's token, for certain.
    /// With `recheck` the waiter tries itself (the lock may be free); else
    /// it sleeps on (the lock went to another client). Either way it is
    /// woken, to learn that the claim ended. If the waiter left, an earlier
    /// unknown outcome is still the claimer's to clean up. A slot that was
    /// due to re-check when claimed re-checks still.
    pub(crate) fn not_granted(mut self, recheck: bool) -> Orphan {
        let slot = self.slot.take().expect("resolved once");
        let next = if recheck || self.was_recheck {
            SlotState::Recheck
        } else {
            SlotState::Open
        };
        resolve(&self.inbox, &slot, next, false, |doubt| {
            if doubt {
                Orphan::Unknown
            } else {
                Orphan::Left
            }
        })
    }

    /// The release's outcome is unknown (an error): the waiter re-checks, or
    /// if it left, the claimer releases the token as an abandoned one.
    pub(crate) fn unknown(mut self) -> Orphan {
        let slot = self.slot.take().expect("resolved once");
        resolve(&self.inbox, &slot, SlotState::Recheck, true, |_| {
            Orphan::Unknown
        })
    }
}

/// Resolve a claim on `slot`: a waiter still there moves to `next` (with
/// `doubt` recorded) and is woken after the lock is dropped; a waiter that
/// left is gone for good, and `left` (given the slot's doubt) says what the
/// claimer cleans up.
fn resolve<W: Wake>(
    inbox: &Inbox<W>,
    slot: &Slot<W>,
    next: SlotState,
    doubt: bool,
    left: impl FnOnce(bool) -> Orphan,
) -> Orphan {
    let mut state = sync::lock(&slot.state);
    match *state {
        SlotState::Claimed => {
            *state = next;
            if doubt {
                slot.doubt.store(true, SeqCst);
            }
            drop(state);
            slot.wake.wake();
            Orphan::None
        }
        SlotState::Abandoned => {
            let had_doubt = slot.doubt.load(SeqCst);
            Slot::set_gone(&mut state, inbox);
            left(had_doubt)
        }
        // Only the claimer leaves `Claimed` or `Abandoned`.
        _ => Orphan::None,
    }
}

impl<W: Wake> Drop for Claim<W> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            // Unresolved: the waiter re-checks. The library resolves every
            // claim itself (an abandoned slot's clean-up needs a release).
            let _ = resolve(&self.inbox, &slot, SlotState::Recheck, true, |_| {
                Orphan::Unknown
            });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[derive(Debug, Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(&self) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    fn woken(o: &Offer<Count>) -> usize {
        o.waker().0.load(SeqCst)
    }

    #[test]
    fn claims_go_to_the_oldest_open_slot_and_never_to_a_trying_or_claimed_one() {
        let inbox = Arc::new(Inbox::default());
        let a = Inbox::offer(&inbox, "a", 10, Count::default());
        let b = Inbox::offer(&inbox, "b", 20, Count::default());
        let c = Inbox::offer(&inbox, "c", 30, Count::default());
        assert_eq!(a.begin_try(), Gate::Go);
        let claim = Inbox::claim(&inbox).expect("b is open");
        assert_eq!((claim.token(), claim.lease_ms()), ("b", 20));
        assert_eq!(
            Inbox::claim(&inbox).map(|c| c.token().to_owned()),
            Some("c".into())
        );
        // c's claim above was dropped unresolved: c re-checks.
        assert_eq!(woken(&c), 1);
        assert_eq!(c.outcome(), Handed::Recheck);
        // b is claimed: its own try waits for the claim's outcome.
        assert_eq!(b.begin_try(), Gate::Claimed);
        let t0 = Instant::now();
        assert_eq!(claim.granted(7, t0), Orphan::None);
        assert_eq!(woken(&b), 1);
        assert_eq!(b.outcome(), Handed::Granted(7, t0));
        assert_eq!(b.leave(), Orphan::None, "a grant is taken once");
        a.end_try();
        assert_eq!(
            Inbox::claim(&inbox).map(|c| c.token().to_owned()),
            Some("a".into())
        );
    }

    #[test]
    fn a_grant_is_released_by_whoever_sees_the_waiter_gone_second() {
        let inbox = Arc::new(Inbox::default());
        let t0 = Instant::now();
        // The waiter leaves before the grant: the claimer releases it.
        let a = Inbox::offer(&inbox, "a", 10, Count::default());
        let claim = Inbox::claim(&inbox).unwrap();
        assert_eq!(a.leave(), Orphan::None);
        assert_eq!(claim.granted(5, t0), Orphan::Held(5));
        // ... or before an unknown outcome: released as abandoned.
        let b = Inbox::offer(&inbox, "b", 10, Count::default());
        let claim = Inbox::claim(&inbox).unwrap();
        drop(b);
        assert_eq!(claim.unknown(), Orphan::Unknown);
        // ... or before a certain refusal: nothing to release.
        let c = Inbox::offer(&inbox, "c", 10, Count::default());
        let claim = Inbox::claim(&inbox).unwrap();
        drop(c);
        assert_eq!(claim.not_granted(true), Orphan::Left);
        // The waiter leaves after the grant, without taking it: it releases.
        let d = Inbox::offer(&inbox, "d", 10, Count::default());
        assert_eq!(Inbox::claim(&inbox).unwrap().granted(6, t0), Orphan::None);
        assert_eq!(d.leave(), Orphan::Held(6));
        assert_eq!(d.leave(), Orphan::None);
        assert!(Inbox::claim(&inbox).is_none());
    }

    #[test]
    fn a_refusal_sends_the_waiter_to_recheck_only_when_the_lock_may_be_free() {
        let inbox = Arc::new(Inbox::default());
        let a = Inbox::offer(&inbox, "a", 10, Count::default());
        // The lock went to another client: woken, to stop waiting for the
        // claim, but with nothing to do.
        let claim = Inbox::claim(&inbox).unwrap();
        assert!(a.is_claimed());
        claim.not_granted(false);
        assert!(!a.is_claimed());
        assert_eq!((woken(&a), a.outcome()), (1, Handed::Pending));
        Inbox::claim(&inbox).unwrap().not_granted(true);
        assert_eq!((woken(&a), a.outcome()), (2, Handed::Recheck));
        assert_eq!(Inbox::claim(&inbox).unwrap().unknown(), Orphan::None);
        assert_eq!((woken(&a), a.outcome()), (3, Handed::Recheck));
        assert_eq!(a.begin_try(), Gate::Go);
        a.end_try();
        // That outcome stays unknown: the lock may be (or become) this
        // token's, so leaving releases the token; so does a later claim
        // that finds the waiter gone, whatever its outcome.
        assert_eq!(a.leave(), Orphan::Unknown);
        let b = Inbox::offer(&inbox, "b", 10, Count::default());
        assert_eq!(Inbox::claim(&inbox).unwrap().unknown(), Orphan::None);
        let claim = Inbox::claim(&inbox).unwrap();
        assert_eq!(b.leave(), Orphan::None);
        assert_eq!(claim.not_granted(false), Orphan::Unknown);
        // Without that doubt, a certain refusal for a waiter that left
        // leaves nothing to release.
        let d = Inbox::offer(&inbox, "d", 10, Count::default());
        let claim = Inbox::claim(&inbox).unwrap();
        drop(d);
        assert_eq!(claim.not_granted(false), Orphan::Left);
        // A lock the waiter then took itself is not released.
        let c = Inbox::offer(&inbox, "c", 10, Count::default());
        assert_eq!(Inbox::claim(&inbox).unwrap().unknown(), Orphan::None);
        c.acquired();
        assert_eq!(c.leave(), Orphan::None);
    }

    /// A waiter whose claim ended with an unknown outcome (its token may
    /// hold the lock) and is then claimed by another batch that is refused
    /// still re-checks: it is not sent back to plain waiting, which would
    /// let it sleep while holding.
    #[test]
    fn a_refused_claim_keeps_a_doubted_waiter_rechecking() {
        let inbox = Arc::new(Inbox::default());
        let a = Inbox::offer(&inbox, "a", 10, Count::default());
        // A batch leader claims `a`, and is cancelled in flight.
        Inbox::claim(&inbox).unwrap().unknown();
        assert_eq!(woken(&a), 1);
        // Before `a` runs, another reader's batch claims it and is refused
        // (a writer queued ahead).
        Inbox::claim(&inbox)
            .expect("a re-checking slot is claimable")
            .not_granted(false);
        assert_eq!(woken(&a), 2);
        assert_eq!(a.outcome(), Handed::Recheck);
        // Its doubt is kept for the clean-up too.
        assert_eq!(a.leave(), Orphan::Unknown);
    }

    #[test]
    fn slots_that_left_are_compacted_away() {
        let inbox = Arc::new(Inbox::default());
        let live = Inbox::offer(&inbox, "live", 10, Count::default());
        for i in 0..1000 {
            drop(Inbox::offer(&inbox, &i.to_string(), 10, Count::default()));
            assert!(inbox.len() <= 4, "{} slots for 1 live one", inbox.len());
        }
        assert_eq!(
            Inbox::claim(&inbox).map(|c| c.token().to_owned()),
            Some("live".into())
        );
        drop(live);
    }
}
