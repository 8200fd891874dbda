//! [`Presence`]: the counters of one key's entry in the registry, and the
//! two handshakes between them that decide who cleans up.
//!
//! * **Subscription**: a newcomer raises `count` and then reads `confirmed`;
//!   a clean-up clears `confirmed` and then reads `count`. So either the
//!   newcomer sees the channel unconfirmed (and subscribes again under the
//!   entry's mutex, after the clean-up), or the clean-up sees the newcomer
//!   and keeps the subscription ([`unconfirm_if_idle`](Presence::unconfirm_if_idle)).
//! * **Queue**: the last waiter to leave lowers `count` and then reads
//!   `requeues`; a release that queued the client again lowers `requeues`
//!   and then reads `count`. So the last of the two to finish sees both at
//!   zero and takes the client out of the queue
//!   ([`take_queue_leave`](Presence::take_queue_leave)).
//! * **Take**: a try by the only task that took the lock (and with it took
//!   the client out of the queue) clears the queue mark only if its count of
//!   marks did not move since the try was sent and no try was abandoned
//!   since the last `LEAVE`, in one compare-and-swap of the word that holds
//!   them, then reads `count` and `requeues` again and sets the mark back if
//!   a task or a requeue came
//!   ([`unqueue_if_alone`](Presence::unqueue_if_alone)).
//!
//! Both are Dekker-style (a write, then a read of the other's variable):
//! they need the write and the read ordered, which `SeqCst` atomics give on
//! hardware. loom models `SeqCst` accesses as acquire/release only, so each
//! side also issues `fence(SeqCst)` between its write and its read: correct
//! on hardware, and checkable by the loom models in `relaylock-loom`.

use super::sync::{fence, AtomicBool, AtomicUsize, Ordering::SeqCst};

/// [`Presence`]'s queue word: the client may be queued.
const QUEUED: usize = 1;
/// ... and a try was abandoned in flight since the last `LEAVE`.
const UNKNOWN: usize = 2;
/// ... and above these bits, the count of marks.
const MARKS: u32 = 2;

/// The counters of one key's local waiters.
#[derive(Debug)]
pub(crate) struct Presence {
    /// Local tasks registered for this key.
    count: AtomicUsize,
    /// The channel's subscription is known to be confirmed.
    confirmed: AtomicBool,
    /// Bit 0 (`QUEUED`): a try or a release of this client may have
    /// registered it in the lock's queue (and nothing took it out since).
    /// Bit 1 (`UNKNOWN`): a try was abandoned in flight since the last
    /// `LEAVE`: Redis may run it at any time, even after a later take, so
    /// only a `LEAVE` may forget this mark. The bits above: how many times
    /// the client was marked, so that a take can tell whether anything
    /// marked it while its try was out ([`unqueue_if_alone`]); one word, so
    /// the flags and the count change together.
    ///
    /// [`unqueue_if_alone`]: Presence::unqueue_if_alone
    queued: AtomicUsize,
    /// Release scripts of this client in flight that may queue it again.
    requeues: AtomicUsize,
}

impl Presence {
    pub(crate) fn new() -> Self {
        Presence {
            count: AtomicUsize::new(0),
            confirmed: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            requeues: AtomicUsize::new(0),
        }
    }

    /// A task registers (under the map's shard lock, so never on an entry
    /// already removed). Returns whether other tasks were registered.
    pub(crate) fn join(&self) -> bool {
        let before = self.count.fetch_add(1, SeqCst);
        fence(SeqCst);
        before > 0
    }

    /// A task leaves; `queued_try` says a try that may have queued this
    /// client was still in flight. Returns whether it was the last.
    pub(crate) fn leave(&self, queued_try: bool) -> bool {
        if queued_try {
            self.mark(UNKNOWN);
        }
        let last = self.count.fetch_sub(1, SeqCst) == 1;
        fence(SeqCst);
        last
    }

    /// Local tasks registered now.
    pub(crate) fn count(&self) -> usize {
        self.count.load(SeqCst)
    }

    /// Whether nobody is registered and no release that may queue this
    /// client is in flight: the entry may leave the map (a release in
    /// flight still needs it to take the client out of the queue after).
    pub(crate) fn is_unused(&self) -> bool {
        self.count.load(SeqCst) == 0 && self.requeues.load(SeqCst) == 0
    }

    /// Whether nobody is registered and nothing may have queued this client
    /// or be about to: the entry can go without any clean-up.
    pub(crate) fn is_idle_and_unqueued(&self) -> bool {
        self.count.load(SeqCst) == 0
            && self.queued.load(SeqCst) & QUEUED == 0
            && self.requeues.load(SeqCst) == 0
    }

    pub(crate) fn is_confirmed(&self) -> bool {
        self.confirmed.load(SeqCst)
    }

    /// The subscription was confirmed (or, `false`, may be gone).
    pub(crate) fn set_confirmed(&self, confirmed: bool) {
        self.confirmed.store(confirmed, SeqCst);
    }

    /// The clean-up's side of the subscription handshake: unconfirm the
    /// channel, then check that nobody came. Returns `true` when the
    /// channel may be unsubscribed (a newcomer from now on sees it
    /// unconfirmed and subscribes again after the clean-up); `false` when a
    /// task is registered (the confirmation is restored).
    pub(crate) fn unconfirm_if_idle(&self) -> bool {
        let was = self.confirmed.swap(false, SeqCst);
        fence(SeqCst);
        if self.count.load(SeqCst) > 0 {
            self.confirmed.store(was, SeqCst);
            return false;
        }
        true
    }

    /// A try registered this client in the lock's queue.
    pub(crate) fn mark_queued(&self) {
        self.mark(0);
    }

    /// Count one more mark and set `QUEUED` (and `extra`).
    fn mark(&self, extra: usize) {
        let mut v = self.queued.load(SeqCst);
        loop {
            let marked = (((v >> MARKS).wrapping_add(1)) << MARKS) | (v & UNKNOWN) | QUEUED | extra;
            match self.queued.compare_exchange(v, marked, SeqCst, SeqCst) {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
    }

    /// How many times the client was marked queued so far: read before a
    /// try is sent, for [`unqueue_if_alone`](Self::unqueue_if_alone).
    pub(crate) fn marks(&self) -> usize {
        self.queued.load(SeqCst) >> MARKS
    }

    /// A lock's try by the only task registered took the lock, and the
    /// script took this client out of the queue with it: forget that it was
    /// queued, so the task's departure sends no `LEAVE` that would find
    /// nothing to do (one wasted script call per contended acquisition in a
    /// client with one task per key). Not if anything marked the client
    /// queued since `before` (read before the try was sent: a newcomer's
    /// refused try that Redis ran after the take queued the client again,
    /// even if the newcomer left since), if another task is registered, or
    /// if a release that may queue the client again is in flight. The flag
    /// is cleared only if its count is still `before` and no try was
    /// abandoned since the last `LEAVE` (`UNKNOWN`: a newcomer's abandoned
    /// try that Redis runs after the take would queue the client with
    /// nobody to take it out); one compare-and-swap of the
    /// word. Then the tasks and releases are read again (Dekker with `join`
    /// and `begin_requeue`, as the other handshakes): if one came, the flag
    /// is set back, unless a mark already did.
    pub(crate) fn unqueue_if_alone(&self, before: usize) {
        let alone = || self.count.load(SeqCst) == 1 && self.requeues.load(SeqCst) == 0;
        if !alone() {
            return;
        }
        let (marked, cleared) = ((before << MARKS) | QUEUED, before << MARKS);
        if self
            .queued
            .compare_exchange(marked, cleared, SeqCst, SeqCst)
            .is_err()
        {
            return;
        }
        fence(SeqCst);
        if !alone() {
            let _ = self
                .queued
                .compare_exchange(cleared, marked, SeqCst, SeqCst);
        }
    }

    /// A release that will queue this client again if tasks still wait:
    /// returns whether it should (then [`end_requeue`](Self::end_requeue)
    /// must follow once its outcome is known or abandoned).
    pub(crate) fn begin_requeue(&self) -> bool {
        self.requeues.fetch_add(1, SeqCst);
        fence(SeqCst);
        if self.count.load(SeqCst) == 0 {
            self.requeues.fetch_sub(1, SeqCst);
            fence(SeqCst);
            return false;
        }
        true
    }

    /// The requeueing release's outcome is known (or abandoned): the client
    /// may be queued.
    pub(crate) fn end_requeue(&self) {
        self.mark_queued();
        self.requeues.fetch_sub(1, SeqCst);
        fence(SeqCst);
    }

    /// The queue side of the handshake: whether THIS caller must take the
    /// client out of the lock's queue now (nobody waits, no release that may
    /// queue it is in flight, and it may be queued). At most one caller gets
    /// `true` per time the client was queued.
    pub(crate) fn take_queue_leave(&self) -> bool {
        if self.count.load(SeqCst) != 0 || self.requeues.load(SeqCst) != 0 {
            return false;
        }
        self.queued.fetch_and(!(QUEUED | UNKNOWN), SeqCst) & QUEUED == QUEUED
    }
}
