//! A release of this client hands the lock to a local waiter's slot while
//! that waiter tries on its own, takes a grant, or leaves; on the real
//! `handoff::Inbox`.
//!
//! Checked: a lock granted to a slot ends with exactly one party in charge
//! of it (the waiter holds it, or exactly one of the waiter and the claimer
//! releases it); a slot whose claim ended unknown is released by exactly one
//! of them when the waiter leaves; a claim never lands on a slot whose own
//! try is in flight; and a waiter whose claim is resolved while it sleeps is
//! woken, also when the lock went to another client.

use std::time::Instant;

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;
use loom::thread;

use super::explore;
use crate::state::handoff::{Gate, Handed, Inbox, Orphan, Wake};

#[derive(Debug, Default)]
struct Flag(AtomicUsize);

impl Wake for Flag {
    fn wake(&self) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// What the waiter ended with.
#[derive(Debug, PartialEq, Eq)]
enum Waiter {
    /// Holds the lock through the grant.
    Holds,
    /// Left, releasing what `leave` reported.
    Left(Orphan),
}

#[test]
fn a_grant_has_exactly_one_owner() {
    explore("hand-over: grant vs try vs leave", || {
        let t0 = Instant::now();
        let inbox: Arc<Inbox<Flag>> = Arc::new(Inbox::default());
        let offer = Inbox::offer(&inbox, "w", 10, Flag::default());
        let claimer = {
            let inbox = Arc::clone(&inbox);
            thread::spawn(move || Inbox::claim(&inbox).map(|c| c.granted(7, t0)))
        };
        // The waiter: one own try, then it looks at its slot and leaves.
        let mut end = None;
        match offer.begin_try() {
            Gate::Go => offer.end_try(),
            Gate::Granted(7, _) => end = Some(Waiter::Holds),
            Gate::Claimed => {}
            other => panic!("{other:?}"),
        }
        if end.is_none() {
            if let Handed::Granted(7, _) = offer.outcome() {
                end = Some(Waiter::Holds);
            }
        }
        let end = end.unwrap_or_else(|| Waiter::Left(offer.leave()));
        let claim = claimer.join().unwrap();
        match claim {
            // No claim: the slot was trying or gone; nothing was granted.
            None => assert_eq!(end, Waiter::Left(Orphan::None)),
            Some(by_claimer) => {
                let owners = usize::from(end == Waiter::Holds)
                    + usize::from(end == Waiter::Left(Orphan::Held(7)))
                    + usize::from(by_claimer == Orphan::Held(7));
                assert_eq!(owners, 1, "waiter {end:?}, claimer {by_claimer:?}");
                assert!(matches!(by_claimer, Orphan::None | Orphan::Held(7)));
            }
        }
    });
}

#[test]
fn an_unknown_outcome_is_cleaned_up_exactly_once() {
    explore("hand-over: unknown outcome vs leave", || {
        let inbox: Arc<Inbox<Flag>> = Arc::new(Inbox::default());
        let offer = Inbox::offer(&inbox, "w", 10, Flag::default());
        let claimer = {
            let inbox = Arc::clone(&inbox);
            thread::spawn(move || Inbox::claim(&inbox).map(|c| c.unknown()))
        };
        let left = offer.leave();
        let claim = claimer.join().unwrap();
        match claim {
            None => assert_eq!(left, Orphan::None),
            Some(by_claimer) => {
                let cleanups = usize::from(left == Orphan::Unknown)
                    + usize::from(by_claimer == Orphan::Unknown);
                assert_eq!(cleanups, 1, "waiter {left:?}, claimer {by_claimer:?}");
            }
        }
    });
}

#[test]
fn a_resolved_claim_wakes_its_sleeping_waiter() {
    explore("hand-over: a resolution is never missed", || {
        let inbox: Arc<Inbox<Flag>> = Arc::new(Inbox::default());
        let offer = Inbox::offer(&inbox, "w", 10, Flag::default());
        let claim = Inbox::claim(&inbox).expect("open");
        let claimer = thread::spawn(move || claim.not_granted(true));
        // The waiter wakes when its own try is refused by the claim...
        let gate = offer.begin_try();
        assert_eq!(claimer.join().unwrap(), Orphan::None);
        match gate {
            // ...which resolved before the waiter looked: it may try (the
            // refusal said the lock may be free).
            Gate::Go => offer.end_try(),
            // ...or after: the resolution woke it and tells it to re-check.
            Gate::Claimed => {
                assert_eq!(offer.waker().0.load(SeqCst), 1);
                assert_eq!(offer.outcome(), Handed::Recheck);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(offer.leave(), Orphan::None);
        assert_eq!(inbox.len(), 1);
    });
}

#[test]
fn a_claim_that_went_elsewhere_still_wakes_its_waiter() {
    explore(
        "hand-over: a refusal without a re-check is never missed",
        || {
            let inbox: Arc<Inbox<Flag>> = Arc::new(Inbox::default());
            let offer = Inbox::offer(&inbox, "w", 10, Flag::default());
            let claim = Inbox::claim(&inbox).expect("open");
            // The lock went to another client: the waiter has nothing to do,
            // but it must learn that the claim ended, or it would keep ignoring
            // the key's wake-ups (it does while its slot is claimed).
            let claimer = thread::spawn(move || claim.not_granted(false));
            let claimed = offer.is_claimed();
            assert_eq!(claimer.join().unwrap(), Orphan::None);
            if claimed {
                // It saw the claim before the refusal: the refusal woke it.
                assert_eq!(offer.waker().0.load(SeqCst), 1);
            }
            assert_eq!(offer.outcome(), Handed::Pending);
            assert!(!offer.is_claimed());
            assert_eq!(offer.begin_try(), Gate::Go);
            offer.end_try();
            assert_eq!(offer.leave(), Orphan::None);
        },
    );
}
