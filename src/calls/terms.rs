//! What a call is asked to do besides its script's plain work: the terms of
//! a try, a semaphore try's place in the queue, and a release's requeue and
//! hand-over.

use std::time::Duration;

/// What a [`RELEASE`](crate::scripts::RELEASE) call does besides
/// releasing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseCall<'a> {
    /// This client still has local waiters: it queues again, at the back.
    pub(crate) requeue: bool,
    /// A local waiter to give the lock to at once when no other client is
    /// queued.
    pub(crate) next: Option<HandOver<'a>>,
    /// False for an operator's release ([`unlock`](crate::unlock)): the
    /// fence does not join the ring of released fences, so the holder's
    /// own later release reports the loss instead of a replay.
    pub(crate) record: bool,
}

/// The local waiter a release names to be given the lock (see
/// `crate::state::handoff`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandOver<'a> {
    /// The waiter's token.
    pub(crate) token: &'a str,
    /// Its lease.
    pub(crate) lease_ms: u64,
    /// This client stays queued after giving the lock: other local tasks
    /// still wait.
    pub(crate) keep: bool,
}

/// The terms of one try ([`Calls::acquire`], [`Calls::sem_acquire`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TryTerms {
    /// The lease a hold it takes gets, in ms.
    pub(crate) lease_ms: u64,
    /// What is left of the caller's deadline: it bounds the call (fred's
    /// own timeout: a call that runs out is never written later).
    pub(crate) within: Option<Duration>,
    /// The re-check bound of a refusal when Redis reports no expiry (a key
    /// relaylock did not write, a void marker).
    pub(crate) default_lease: Duration,
    /// A `min_replicas` call: a lock it takes names its fence in its value
    /// (no fast path), which the replica check matches exactly.
    pub(crate) exact: bool,
}

/// How a semaphore try stands in the queue ([`Calls::sem_acquire`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueuePlace<'a> {
    /// This client's id (its role's) for a caller that will wait: it
    /// queues, and may take a reservation; `""` otherwise.
    pub(crate) client: &'a str,
    /// Other local waiters want permits: an admitted client keeps its
    /// place in the queue.
    pub(crate) more: bool,
    /// The largest need among this client's local waiters.
    pub(crate) want: u32,
    /// The caller must not take its client's reservation (a reader arriving
    /// behind its client's waiters, for whom the reservation was made).
    pub(crate) fresh: bool,
}
