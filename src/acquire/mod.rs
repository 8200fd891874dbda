//! The acquire loop: register -> try -> subscribe (confirmed) -> try if this
//! waiter confirmed the subscription -> wait.
//!
//! # Guarantees
//!
//! * Every wait is bounded: by a release message, by the holder's remaining
//!   lease as the latest local try saw it (so a lost message costs at most
//!   that), by a reconnect of the subscriber, and by the caller's deadline.
//! * One retry per release: a release names the client that waited longest
//!   (or none, when no other client is queued) and wakes one of its local
//!   waiters; a newcomer that finds other local tasks registered for the key
//!   queues behind them instead of trying first.
//! * Cancellation: dropping a lock future at any await point leaves nothing
//!   behind. Its waiter registration is removed; a wake-up it had received is
//!   passed to the next local waiter; an acquire script in flight, which may
//!   have taken the lock without the reply reaching us, is followed by a
//!   release of that token in the background (and a void marker, should the
//!   acquire reach Redis after it), so no orphan lock blocks everyone for a
//!   lease.

mod guards;
mod multi;
mod state;

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use fred::interfaces::ClientLike;
use metrics::SharedString;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::calls::{QueuePlace, TryReply, TryTerms};
use crate::error::{Error, Result};
use crate::guard::{Acquired, LockGuard};
use crate::hold_id::HoldId;
use crate::inner::ClientInner;
use crate::metrics::{self as m, Outcome, WakeCause};
use crate::options::{validate_lease, validate_replicas, LockOptions, WaitStrategy};
use crate::registry::{NotSubscribed, Waiter};
use crate::release::{release, release_in_background};
use crate::replicas::{acknowledged, Acquisition};
use crate::scripts::{Kind, Names, HANDOFF_GRACE_MS, RW_WRITE};
use crate::state::handoff::{Gate, Handed, Offer};
use guards::{Offered, OnDrop, ReadBatch};
pub(crate) use multi::{lock_all, KeySet};
use state::{Turn, WaitState};

/// How long after a wait's deadline its timer ends the call whatever it
/// awaits: the tries, bounded by fred's own timeout at the deadline, end
/// first (and are never written later).
const DEADLINE_SLACK: Duration = Duration::from_millis(20);

/// How long a try must have been out without its reply, at a wait's
/// deadline, for the wait to end `Unavailable` rather than `Timeout`: far
/// longer than a round trip to a reachable server.
const UNANSWERED: Duration = Duration::from_millis(50);

/// A probe claimed when a lease ran out (or none was known) has this long to
/// record the next holder's lease before another local waiter may probe.
const PROBE_SLICE: Duration = Duration::from_millis(50);

/// While a channel's subscription cannot be confirmed (subscriber connection
/// down or silent, ACL forbids the channel), ONE local waiter per key (the
/// poller) re-checks this often: under half the hand-over grace, so a lock
/// reserved for this client is taken before the reservation lapses. The
/// other waiters of the key sleep until the role is handed on to them.
const DEGRADED_POLL: Duration = Duration::from_millis(HANDOFF_GRACE_MS / 2);

/// Most other local readers one reader's acquire takes permits for.
const READ_BATCH: usize = 256;

/// The outcome of making sure a key's channel is subscribed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Subscription {
    /// It already was: no round trip, nothing missed.
    AlreadyConfirmed,
    /// This call confirmed it: a release published before may have reached
    /// nobody, so the caller tries once more before waiting.
    ConfirmedNow,
    /// It could not be confirmed (degraded): the key's poller re-checks.
    Unconfirmed,
}

/// How one sleep of the wait loop ended (the loop's state says what the
/// next turn does).
enum Woken {
    /// A release of this client gave the lock to this call.
    Granted(u64, Instant),
    /// The deadline passed.
    Deadline,
    /// Woken by this cause: counted when the next turn tries.
    By(WakeCause),
    /// Only the bound or the polling changed: not a wake-up to count.
    Again,
}

/// What one acquire script call found.
enum Attempt {
    /// Taken, with its fencing token and when the call that took it was sent.
    Acquired(u64, Instant),
    /// Held by another owner (or reserved for another client).
    Held,
}

// The command futures of a try, a subscription or a replica WAIT are boxed
// where they are awaited: a waiter's own state, which every sleeping waiter
// carries, then holds none of their space.

/// One lock call: everything fixed for its lifetime.
struct LockCall<'a> {
    inner: &'a Arc<ClientInner>,
    key: &'a str,
    names: Names,
    token: Str,
    lease: Duration,
    lease_ms: u64,
    name: Option<&'a SharedString>,
    started: Instant,
    /// Renewed by the watchdog.
    renew: bool,
    /// `min_replicas`: how many, and the `WAIT` timeout in ms.
    replicas: Option<(u32, u64)>,
    /// A semaphore call: the permits it takes and its limit. `None`: a lock.
    permits: Option<(u32, u32)>,
    /// The wait's deadline, when it has one (not `wait(0)`, one try): every
    /// try is bounded by what is left of it (fred's own timeout, so a try
    /// cut off is never written later), and the whole wait by it.
    deadline: Option<Instant>,
    /// A try of this call is out without its reply: when it was sent, in
    /// µs after `started`, plus one (0: none is out). At the deadline, a
    /// try out for [`UNANSWERED`] or longer makes the error `Unavailable`.
    unanswered: std::sync::atomic::AtomicU64,
    /// The fencing token of a hold this call has in Redis and has not
    /// handed to a guard yet. Dropping the call (cancelled, or unwound by a
    /// panic) releases it: ownership of a lock is never only a value on the
    /// stack.
    owned: std::sync::Mutex<Option<u64>>,
    /// A wait for one key of a multi-key lock ([`park`]): its tries and
    /// wake-ups count as the multi-key lock's, and its outcome is the
    /// multi-key call's to record.
    part: bool,
}

impl Drop for LockCall<'_> {
    fn drop(&mut self) {
        let owned = crate::state::sync::lock(&self.owned).take();
        if let Some(fence) = owned {
            let hold = HoldId::held(
                self.names.clone(),
                self.token.clone(),
                fence,
                self.held_permits(),
            );
            release_in_background(Arc::clone(self.inner), hold, None);
        }
    }
}

/// What one call acquires: a primitive of `kind`, and for all but a lock
/// `n` permits under `limit` (a semaphore's limit as this caller gives it;
/// a read-write lock's read takes 1 of [`RW_WRITE`] permits, a write all).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Want {
    kind: Kind,
    permits: Option<(u32, u32)>,
}

impl Want {
    /// A lock.
    pub(crate) const LOCK: Want = Want {
        kind: Kind::Mutex,
        permits: None,
    };
    /// A read-write lock's read.
    pub(crate) const READ: Want = Want {
        kind: Kind::Read,
        permits: Some((1, RW_WRITE)),
    };
    /// A read-write lock's write.
    pub(crate) const WRITE: Want = Want {
        kind: Kind::Write,
        permits: Some((RW_WRITE, RW_WRITE)),
    };

    /// `n` permits of a semaphore of `limit`.
    pub(crate) fn permits(n: u32, limit: u32) -> Want {
        Want {
            kind: Kind::Semaphore,
            permits: Some((n, limit)),
        }
    }
}

pub(crate) async fn lock(
    inner: &Arc<ClientInner>,
    key: &str,
    options: &LockOptions,
    want: Want,
) -> Result<LockGuard> {
    // A shutdown ends the wait (dropping it is cancel-safe) and waits for
    // this call to wind down. Taken before the call, so it is let go after
    // the call's own drop spawned whatever it releases.
    let _busy = inner.background.token();
    // One span per lock call, a child of the caller's (a request's span
    // holds it): the key, the metrics name, and once known the fencing
    // token and the outcome. Nothing is made when no subscriber listens.
    let span = tracing::info_span!(
        "relaylock.lock",
        key,
        primitive = want.kind.label(),
        name = options.name.as_deref(),
        fence = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let call = LockCall::new(inner, key, options, want)?;
    let outcome = tracing::Instrument::instrument(
        async {
            tokio::select! {
                biased;
                _ = inner.closing.cancelled() => Err(Error::Shutdown),
                outcome = call.wait(options) => outcome,
            }
        },
        span.clone(),
    )
    .await;
    record_outcome(&span, &outcome);
    outcome.and_then(|(fence, sent)| call.into_guard(fence, sent))
}

/// Wait for one key of a multi-key lock, with the multi-key call's
/// `token` (every key of it has the one token) and `options` (their wait
/// is what is left of the call's deadline): the lock loop of [`lock`],
/// which queues this client in the key's FIFO queue as any lock call.
///
/// # Cancel safety
///
/// As [`lock`]: dropped, it leaves no queue entry, and what a try in flight
/// may have taken is released in the background.
pub(crate) async fn park(
    inner: &Arc<ClientInner>,
    key: &str,
    names: Names,
    token: Str,
    options: &LockOptions,
) -> Result<LockGuard> {
    let mut call = LockCall::with_token(inner, key, options, Want::LOCK, names, token)?;
    call.part = true;
    let outcome = tokio::select! {
        biased;
        _ = inner.closing.cancelled() => Err(Error::Shutdown),
        outcome = call.wait(options) => outcome,
    };
    outcome.and_then(|(fence, sent)| call.into_guard(fence, sent))
}

/// A lock call's outcome, in its span.
fn record_outcome(span: &tracing::Span, outcome: &Result<(u64, Instant)>) {
    if span.is_disabled() {
        return;
    }
    let what = match outcome {
        Ok((fence, _)) => {
            span.record("fence", fence);
            "acquired"
        }
        Err(Error::Timeout { .. }) => "timeout",
        Err(Error::Unavailable { .. }) => "unavailable",
        Err(Error::Shutdown) => "shutdown",
        Err(_) => "error",
    };
    span.record("outcome", what);
}

pub(crate) async fn try_lock(
    inner: &Arc<ClientInner>,
    key: &str,
    options: &LockOptions,
    want: Want,
) -> Result<Option<LockGuard>> {
    // As in `lock`.
    let _busy = inner.background.token();
    let call = LockCall::new(inner, key, options, want)?;
    let outcome = tokio::select! {
        biased;
        _ = inner.closing.cancelled() => Err(Error::Shutdown),
        outcome = call.try_once() => outcome,
    };
    match outcome? {
        Some((fence, sent)) => call.into_guard(fence, sent).map(Some),
        None => Ok(None),
    }
}

impl<'a> LockCall<'a> {
    fn new(
        inner: &'a Arc<ClientInner>,
        key: &'a str,
        options: &'a LockOptions,
        want: Want,
    ) -> Result<Self> {
        inner.check_key(key)?;
        let (names, token) =
            Names::for_call(&inner.prefix, key, want.kind, inner.registry.client_id());
        Self::with_token(inner, key, options, want, names, token)
    }

    /// A call for `names` with a token made by the caller.
    fn with_token(
        inner: &'a Arc<ClientInner>,
        key: &'a str,
        options: &'a LockOptions,
        want: Want,
        names: Names,
        token: Str,
    ) -> Result<Self> {
        let Want { kind: _, permits } = want;
        if let Some((n, limit)) = permits.filter(|(n, limit)| *n == 0 || *limit == 0 || n > limit) {
            return Err(Error::InvalidArgument(format!(
                "a semaphore call takes 1..=limit permits and a limit of at least 1 (asked for {n} of {limit})"
            )));
        }
        let lease = options.lease.unwrap_or(inner.default_lease);
        let lease_ms = validate_lease(lease)?;
        let replicas = match options.replicas {
            Some((n, timeout)) => Some((n, validate_replicas(n, timeout, lease)?)),
            None => None,
        };
        let started = Instant::now();
        let deadline = options
            .wait
            .filter(|w| !w.is_zero())
            .and_then(|w| started.checked_add(w));
        Ok(LockCall {
            deadline,
            unanswered: std::sync::atomic::AtomicU64::new(0),
            inner,
            key,
            names,
            token,
            lease,
            lease_ms,
            name: options.name.as_ref(),
            started,
            renew: options.watchdog.unwrap_or(options.lease.is_none()),
            replicas,
            permits,
            owned: std::sync::Mutex::new(None),
            part: false,
        })
    }

    /// The primitive of this call's metrics: a multi-key lock's for a wait
    /// that is part of one.
    fn metered(&self) -> Kind {
        if self.part {
            Kind::Multi
        } else {
            self.names.kind
        }
    }

    /// The error of a wait whose deadline passed: [`Error::Unavailable`]
    /// when Redis could not be reached (the command connection is down, or
    /// this call's last try got no answer for [`UNANSWERED`]: a wait shorter
    /// than a round trip is a timeout, not an outage), else
    /// [`Error::Timeout`].
    fn timed_out(&self) -> Error {
        let redis = self.inner.calls.redis();
        let sent = self.unanswered.load(std::sync::atomic::Ordering::SeqCst);
        let out = (sent > 0).then(|| {
            let sent = Duration::from_micros(sent - 1);
            self.started.elapsed().saturating_sub(sent)
        });
        let unanswered = out.is_some_and(|out| out >= UNANSWERED);
        if redis.is_connected() && !unanswered {
            return Error::Timeout {
                key: self.key.to_owned(),
            };
        }
        Error::Unavailable {
            key: self.key.to_owned(),
            server: crate::error::servers(&redis.client_config()),
            waited: self.started.elapsed(),
        }
    }

    /// Wait for the lock as the options say; with `min_replicas`, until
    /// enough replicas have it. Records the call's metrics.
    async fn wait(&self, options: &LockOptions) -> Result<(u64, Instant)> {
        let deadline = options.wait.map(|w| self.started.checked_add(w));
        // The wait is a deadline for the whole call, whatever Redis does:
        // every try is bounded by what is left of it (fred marks a try that
        // ran out, so it is never written later), the loop checks it
        // between commands, and this timer, a little later, catches
        // anything else (then the loop's future is dropped: cancel-safe).
        // `wait(0)` is one try, and waits for its reply. A `min_replicas`
        // check after the lock was taken has its own timeout.
        let taken = match self.deadline {
            None => self.wait_untimed(deadline).await,
            Some(d) => {
                tokio::select! {
                    biased;
                    taken = self.wait_untimed(deadline) => taken,
                    () = tokio::time::sleep_until((d + DEADLINE_SLACK).into()) => Err(self.timed_out()),
                }
            }
        };
        // A try that ran out at the deadline is the deadline's error.
        let taken = match taken {
            Err(Error::Redis(e))
                if *e.kind() == fred::error::ErrorKind::Timeout
                    && self.deadline.is_some_and(|d| Instant::now() >= d) =>
            {
                Err(self.timed_out())
            }
            other => other,
        };
        let outcome = match taken {
            // Boxed only with `min_replicas`: the common acquisition does
            // not copy the (large) future into a box for nothing.
            Ok((fence, sent)) if self.replicas.is_some() => Box::pin(self.replicated(fence))
                .await
                .map(|()| (fence, sent)),
            other => other,
        };
        let kind = match &outcome {
            Ok(_) => Outcome::Acquired,
            Err(Error::Timeout { .. } | Error::Unavailable { .. }) => Outcome::Timeout,
            Err(_) => Outcome::Error,
        };
        if !self.part {
            m::finished(self.name, self.names.kind, kind, self.started.elapsed());
        }
        outcome
    }

    /// [`wait`](Self::wait) without its deadline's timer (the loops check
    /// the deadline between commands).
    async fn wait_untimed(&self, deadline: Option<Option<Instant>>) -> Result<(u64, Instant)> {
        match (deadline, self.inner.strategy) {
            // wait(0): exactly one try
            (Some(Some(d)), _) if d <= self.started => {
                match Box::pin(self.attempt(None, false)).await {
                    Ok(Attempt::Acquired(fence, sent)) => Ok((fence, sent)),
                    Ok(Attempt::Held) => Err(self.timed_out()),
                    Err(e) => Err(e),
                }
            }
            (deadline, WaitStrategy::PubSub) => self.wait_pubsub(deadline.flatten()).await,
            (deadline, WaitStrategy::Poll(every)) => {
                self.wait_poll(every, deadline.flatten()).await
            }
        }
    }

    /// One try; with `min_replicas`, then until enough replicas have it.
    /// Records the call's metrics when it acquired (or failed after).
    async fn try_once(&self) -> Result<Option<(u64, Instant)>> {
        let Attempt::Acquired(fence, sent) = self.attempt(None, false).await? else {
            return Ok(None);
        };
        let replicated = self.replicated(fence).await;
        let kind = match replicated {
            Ok(()) => Outcome::Acquired,
            Err(_) => Outcome::Error,
        };
        m::finished(self.name, self.names.kind, kind, self.started.elapsed());
        replicated.map(|()| Some((fence, sent)))
    }

    /// With `min_replicas`: make sure enough replicas have the lock
    /// ([`crate::replicas`]), else release it and fail.
    ///
    /// Dropped at any await point, it releases the lock in the background:
    /// no guard exists yet to do it.
    async fn replicated(&self, fence: u64) -> Result<()> {
        let Some(asked) = self.replicas else {
            return Ok(());
        };
        // Dropped at an await point below, the call's own drop releases the
        // hold it owns (`owned`).
        let acquisition = Acquisition {
            names: &self.names,
            token: &self.token,
            permits: self.held_permits(),
            fence,
            lease_ms: self.lease_ms,
        };
        let (replicas, calls) = (&self.inner.replicas, &self.inner.calls);
        let timeout = self.inner.command_timeout;
        let acknowledged = acknowledged(replicas, calls, acquisition, asked, timeout);
        let failure = match acknowledged.await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        tracing::warn!(key = %self.names.lock, error = %failure,
            "relaylock: the acquisition was not replicated as asked; releasing it");
        let hold = HoldId::held(
            self.names.clone(),
            self.token.clone(),
            fence,
            self.held_permits(),
        );
        let released = release(self.inner, &hold);
        if let Err(e) = released.await {
            tracing::warn!(key = %self.names.lock, error = %e,
                "relaylock: could not release an unreplicated lock; it expires with its lease");
        }
        self.disown();
        Err(failure)
    }

    /// Permits this call takes (1 for a lock).
    fn held_permits(&self) -> u32 {
        self.permits.map_or(1, |(n, _)| n)
    }

    /// This call now has the hold `fence` in Redis (see `owned`).
    fn own(&self, fence: u64) {
        *crate::state::sync::lock(&self.owned) = Some(fence);
    }

    /// The hold was released, or handed on.
    fn disown(&self) {
        *crate::state::sync::lock(&self.owned) = None;
    }

    /// The guard of the hold `fence` (refused, and the hold released,
    /// once the client's shutdown began).
    fn into_guard(mut self, fence: u64, sent: Instant) -> Result<LockGuard> {
        let permits = self.held_permits();
        // The guard owns the hold from here on.
        self.disown();
        LockGuard::new(
            Arc::clone(self.inner),
            Acquired {
                key: self.names.key_in(self.key),
                id: HoldId::held(
                    std::mem::replace(&mut self.names, Names::taken()),
                    std::mem::take(&mut self.token),
                    fence,
                    permits,
                ),
                name: self.name.cloned(),
                sent,
                lease: self.lease,
                renew: self.renew,
            },
        )
    }

    /// One acquire script call. A caller that will wait (with its `queue`
    /// registration) registers this client in the key's queue when the lock
    /// is taken, and may take a reservation made for this client.
    async fn attempt(&self, queue: Option<&Waiter>, fresh: bool) -> Result<Attempt> {
        m::attempt(self.name, self.metered());
        // An acquire script whose outcome we never learn (future dropped,
        // reply lost, timeout) may have taken the lock: release that token.
        let orphan = OnDrop(Some(|| {
            let hold = HoldId {
                names: self.names.clone(),
                token: self.token.clone(),
                fence: None,
                permits: self.held_permits(),
            };
            release_in_background(Arc::clone(self.inner), hold, None)
        }));
        if let Some(w) = queue {
            w.queued_try_in_flight(true);
        }
        // Before the try is sent: whether anything marked the client queued
        // while it was out (see `Waiter::took_unqueued`).
        let marks = queue.map(Waiter::queue_marks);
        let sent = Instant::now();
        // Claims on other local readers' offers, resolved by the reply, or
        // as unknown if this call fails or is dropped before it.
        let mut batch = ReadBatch {
            claims: Vec::new(),
            call: self,
        };
        // A semaphore's client keeps its place in the queue when admitted
        // while other local waiters want permits too.
        let more = self.permits.is_some() && queue.is_some_and(Waiter::has_company);
        let since_start = sent.duration_since(self.started).as_micros();
        self.unanswered.store(
            u64::try_from(since_start).unwrap_or(u64::MAX - 1) + 1,
            std::sync::atomic::Ordering::SeqCst,
        );
        let reply = self.send_try(queue, fresh, more, &mut batch).await?;
        self.unanswered
            .store(0, std::sync::atomic::Ordering::SeqCst);
        // The orphan guard stays armed until `owned` records a hold the
        // reply gives us: a panic in between (a tracing layer) releases it.
        if let TryReply::Acquired { fence, .. } = reply {
            self.own(fence);
        }
        orphan.disarm();
        batch.resolve(reply.batch(), sent);
        if let Some(w) = queue {
            w.queued_try_in_flight(false);
        }
        tracing::trace!(target: "relaylock::hop", hop = "acquire_reply");
        self.read_reply(queue, reply, sent, (marks, more))
    }

    /// Send one try: the lock's acquire script, or the semaphore's, which
    /// takes permits for the other local readers it claims into `batch` too
    /// (`more` as [`attempt`](Self::attempt) found it).
    async fn send_try(
        &self,
        queue: Option<&Waiter>,
        fresh: bool,
        more: bool,
        batch: &mut ReadBatch<'_, '_>,
    ) -> Result<TryReply> {
        static NO_CLIENT: Str = fred::util::static_str("");
        let client = match queue {
            Some(_) => self.inner.registry.role_id(self.names.kind),
            None => &NO_CLIENT,
        };
        let terms = TryTerms {
            lease_ms: self.lease_ms,
            // What is left of the deadline bounds the try (fred's own
            // timeout).
            within: remaining(self.deadline),
            default_lease: self.inner.default_lease,
            exact: self.replicas.is_some(),
        };
        let calls = &self.inner.calls;
        let Some(asked) = self.permits else {
            return calls.acquire(&self.names, &self.token, terms, client).await;
        };
        // The client's queue entry asks for the largest need among its
        // waiters now, so a reservation fits whichever is woken.
        let want = queue.and_then(Waiter::max_need).map_or(asked.0, |(n, _)| n);
        // A reader takes permits for the other local readers that offer in
        // the same call: one call per local batch.
        if queue.is_some() && !fresh && self.names.kind == Kind::Read {
            batch.claims = self
                .inner
                .registry
                .claim_many(&self.names.channel, READ_BATCH);
        }
        let tokens: Vec<(&str, u64)> = batch
            .claims
            .iter()
            .map(|c| (c.token(), c.lease_ms()))
            .collect();
        calls
            .sem_acquire(
                &self.names,
                &self.token,
                asked,
                terms,
                QueuePlace {
                    client,
                    more,
                    want,
                    fresh,
                },
                &tokens,
            )
            .await
    }

    /// What a try's reply means for this call and, through its `queue`
    /// registration, for the key's other local waiters (`marks` and `more`
    /// as [`attempt`](Self::attempt) took them before sending).
    fn read_reply(
        &self,
        queue: Option<&Waiter>,
        reply: TryReply,
        sent: Instant,
        (marks, more): (Option<usize>, bool),
    ) -> Result<Attempt> {
        let (fence, remaining, reservation_left) = match reply {
            TryReply::Acquired {
                fence,
                remaining,
                reservation_left,
                ..
            } => (fence, remaining, reservation_left),
            TryReply::Held(pttl) => {
                if let Some(w) = queue {
                    // The try queued this client; every local waiter now knows
                    // when the holder's lease ends.
                    w.mark_queued();
                    w.note_pttl(sent, pttl);
                }
                return Ok(Attempt::Held);
            }
            TryReply::Unusable(e) => return Err(e),
        };
        // A hold this token already had (a replay, a hand-over found by a
        // re-check, one another reader's batch took for it) ends `remaining`
        // after Redis answered, so no later than `remaining` after this call
        // was sent: its lease is counted from then.
        let sent = remaining.map_or(sent, |left| lease_began(sent, self.lease, left));
        let Some(w) = queue else {
            return Ok(Attempt::Acquired(fence, sent));
        };
        if self.permits.is_some() {
            // A semaphore: the permits this call took say nothing of when
            // the others come back (only a refusal's bound does). What is
            // left of this client's reservation goes to the next local
            // waiter (only a NEW reservation wakes one: see `SEM_RELEASE`).
            w.note_taken();
            if more {
                // The script kept this client queued: the last local waiter
                // to leave takes it out.
                w.mark_queued();
            }
            if reservation_left && w.has_company() {
                w.pass_on();
            }
        } else {
            w.note_acquired(sent, self.lease);
            // A fresh take (not a hold this token already had): the script
            // took this client out of the queue.
            if let (None, Some(before)) = (remaining, marks) {
                w.took_unqueued(before);
            }
        }
        Ok(Attempt::Acquired(fence, sent))
    }

    /// A release of this client gave the lock to this call: `fence`, lease
    /// counted from `sent` (when the release was sent).
    fn granted(&self, waiter: &Waiter, fence: u64, sent: Instant) -> (u64, Instant) {
        self.own(fence);
        tracing::trace!(target: "relaylock::hop", hop = "handed_over");
        if self.permits.is_none() {
            waiter.note_acquired(sent, self.lease);
        }
        m::wakeup(self.name, self.metered(), WakeCause::Handover);
        (fence, sent)
    }

    /// The deadline passed: a lock handed over meanwhile is taken, not
    /// released; otherwise the wait times out.
    fn at_deadline(
        &self,
        waiter: &Waiter,
        offer: Option<&Offer<Notify>>,
    ) -> Result<(u64, Instant)> {
        match offer.map(Offer::outcome) {
            Some(Handed::Granted(fence, sent)) => Ok(self.granted(waiter, fence, sent)),
            _ => Err(self.timed_out()),
        }
    }

    /// The spin-polling baseline: one try per interval.
    async fn wait_poll(
        &self,
        every: Duration,
        deadline: Option<Instant>,
    ) -> Result<(u64, Instant)> {
        loop {
            if let Attempt::Acquired(fence, sent) = Box::pin(self.attempt(None, false)).await? {
                return Ok((fence, sent));
            }
            if expired(deadline) {
                return Err(self.timed_out());
            }
            let nap = remaining(deadline).map_or(every, |r| r.min(every));
            tokio::time::sleep(nap).await;
        }
    }

    /// Subscribe, bounded by the deadline.
    async fn subscribe(&self, waiter: &Waiter, deadline: Option<Instant>) -> Subscription {
        // Boxed for the same reason as a try (see `try_passing_on`).
        let subscribing = Box::pin(waiter.ensure_subscribed());
        let outcome = match remaining(deadline) {
            None => subscribing.await,
            Some(left) => match tokio::time::timeout(left, subscribing).await {
                Ok(r) => r,
                Err(_) => return Subscription::Unconfirmed,
            },
        };
        match outcome {
            Ok(true) => Subscription::AlreadyConfirmed,
            Ok(false) => Subscription::ConfirmedNow,
            Err(NotSubscribed::Failed(e)) => {
                tracing::warn!(error = %e, key = %self.names.lock,
                    "relaylock: could not subscribe to the release channel; one waiter polls every {DEGRADED_POLL:?} meanwhile");
                Subscription::Unconfirmed
            }
            Err(NotSubscribed::FailedRecently) => Subscription::Unconfirmed,
        }
    }

    /// One try by a registered waiter. If it fails or is dropped before its
    /// outcome is known, the duty to re-check passes to the next local waiter
    /// (it may hold a wake-up, or be the one whose try the others rely on).
    async fn try_passing_on(&self, waiter: &Waiter, fresh: bool) -> Result<Attempt> {
        let baton = OnDrop(Some(|| waiter.pass_on()));
        // Boxed: a try holds fred's command futures (kilobytes in a debug
        // build); a waiter that sleeps, which is most of them, does not
        // carry that space. One allocation per try, next to a round trip.
        let attempt = Box::pin(self.attempt(Some(waiter), fresh)).await;
        if attempt.is_ok() {
            baton.disarm();
        }
        attempt
    }

    async fn wait_pubsub(&self, deadline: Option<Instant>) -> Result<(u64, Instant)> {
        let registry = &self.inner.registry;
        // Created before the first try, so a subscriber reconnect during that
        // try (whose release message may be lost) still makes us re-check.
        let reconnect = registry.reconnected();
        tokio::pin!(reconnect);

        // Register BEFORE the first try. Newcomer rule: when other local tasks
        // are already trying or waiting for this key, one of them will see the
        // next release anyway: queue behind them instead of trying first (FIFO,
        // no extra script call, and no herd when many tasks arrive at once at
        // an idle key).
        let (mut waiter, queued) = registry.join(&self.names.channel);
        if let Some((n, limit)) = self.permits {
            waiter.need(n, limit);
        }
        // A read-write lock's reader tries even behind other local waiters:
        // readers share, so waiting behind its neighbours would only delay
        // it, and a refused try sets its client's queue entry to the number
        // of readers waiting now, so the write ahead reserves for all of
        // them at once, not one per write.
        if !queued || self.names.kind == Kind::Read {
            // `fresh`: a reader arriving behind local waiters does not take
            // their client's reservation: that batch is for the readers that
            // queued before a writer, which arriving readers would otherwise
            // push behind it.
            let fresh = queued;
            if let Attempt::Acquired(fence, sent) = self.try_passing_on(&waiter, fresh).await? {
                return Ok((fence, sent));
            }
            if expired(deadline) {
                return Err(self.timed_out());
            }
        }
        waiter.count_as_waiting(self.name);
        // The rest of the wait has a box of its own, made only when the lock
        // was not taken at once: the call's own box (`LockClient::lock`)
        // then stays under glibc's per-thread cache (1,032 B), so the
        // uncontended acquisition does not take the arena's lock for it.
        Box::pin(self.wait_queued(&waiter, queued, deadline, reconnect.as_mut())).await
    }

    /// The wait of a registered waiter whose first try (if it made one) did
    /// not take the lock: subscribe, re-check when needed, and sleep until a
    /// release, a hand-over, a reconnect, the holder's lease or `deadline`.
    async fn wait_queued(
        &self,
        waiter: &Waiter,
        queued: bool,
        deadline: Option<Instant>,
        mut reconnect: Pin<&mut Notified<'a>>,
    ) -> Result<(u64, Instant)> {
        // Only the waiter that CONFIRMED the subscription must try again before
        // sleeping: a release published before the confirmation reached nobody,
        // and that one try observes it for every local waiter. A release after
        // the confirmation wakes some local waiter (or leaves a permit). A
        // queued newcomer tries first only if the re-check is due (or nothing
        // is known yet), and then only one of them (the probe claim). When
        // the subscription cannot be confirmed, the key's poller re-checks.
        let subscribed = self.subscribe(waiter, deadline).await;
        let first =
            Turn::after_subscribing(subscribed, || queued && waiter.claim_probe(PROBE_SLICE));
        // From here on a release of this client may hand the lock to this
        // call's token directly (see `crate::state::handoff`). Not before: a grant
        // during the subscription would sit unused until it returned (up to
        // the command timeout on a degraded key). A release meanwhile wakes
        // a local waiter instead. (Locks, and read-write locks' readers,
        // whose acquire takes permits for the other local readers in the
        // same call; a semaphore's release wakes a local waiter, which
        // retries.)
        let offer = (self.permits.is_none() || self.names.kind == Kind::Read).then(|| Offered {
            offer: waiter.offer(&self.token, self.lease_ms),
            call: self,
        });
        let offer = offer.as_ref().map(|o| &o.offer);
        // This waiter's place in the key's `Notify` queue, kept across loop
        // turns: a turn that ends without a key wake-up (a claim that went
        // elsewhere, an estimate that moved) must not send it to the back,
        // or the waiter a release claims first would be the last one a
        // release message wakes.
        let key_wake = waiter.notified();
        tokio::pin!(key_wake);
        // Declared last, so dropped first: the polling role and a
        // subscription attempt go before the key's wake-up and the offer.
        let mut state = WaitState::new(first);
        loop {
            if let Turn::Try { key_wake } = state.take_turn() {
                if let Some(taken) = self.try_turn(waiter, offer, key_wake, &mut state).await? {
                    return Ok(taken);
                }
            }
            if expired(deadline) {
                return self.at_deadline(waiter, offer);
            }
            let woken = self.sleep(
                (waiter, offer, deadline),
                &mut state,
                key_wake.as_mut(),
                reconnect.as_mut(),
            );
            match woken.await {
                Woken::Granted(fence, sent) => return Ok(self.granted(waiter, fence, sent)),
                Woken::Deadline => return self.at_deadline(waiter, offer),
                Woken::By(cause) if state.tries() => m::wakeup(self.name, self.metered(), cause),
                Woken::By(_) | Woken::Again => {}
            }
        }
    }

    /// A turn of the wait loop that tries: the lock, unless a release of
    /// this client is handing it to this call (`offer`). `key_wake`: a
    /// wake-up of the key's `Notify` brought this turn (see [`Turn`]).
    async fn try_turn(
        &self,
        waiter: &Waiter,
        offer: Option<&Offer<Notify>>,
        key_wake: bool,
        state: &mut WaitState<'_>,
    ) -> Result<Option<(u64, Instant)>> {
        match offer.map_or(Gate::Go, Offer::begin_try) {
            Gate::Go => {
                let attempt = self.try_passing_on(waiter, false).await;
                // Taken: withdraw the offer straight from Trying, so no
                // other reader's batch can claim this token in between (it
                // would take a second hold for it, leaked for a lease).
                if let Ok(Attempt::Acquired(fence, sent)) = attempt {
                    if let Some(o) = offer {
                        o.acquired();
                    }
                    return Ok(Some((fence, sent)));
                }
                if let Some(o) = offer {
                    o.end_try();
                }
                attempt.map(|_| None)
            }
            Gate::Granted(fence, sent) => Ok(Some(self.granted(waiter, fence, sent))),
            // A release of this client is handing the lock to this call: its
            // outcome wakes us. A wake-up from the key's `Notify` that
            // brought us here goes to another waiter; until the outcome we
            // do not take those (taking back our own permit would spin the
            // loop). Only to another task: the claim's outcome supersedes it
            // for this one, and a permit stored for nobody would cost the
            // next newcomer a try.
            Gate::Claimed => {
                if key_wake && waiter.has_company() {
                    waiter.pass_on();
                }
                state.claimed();
                Ok(None)
            }
        }
    }

    /// Sleep until a release message, a reconnect, or the next re-check: the
    /// end of the current holder's lease as this client last learned it (or
    /// its own re-check). A newer, earlier estimate wakes us to recompute
    /// the bound. Every wake-up is a transition of `state`.
    ///
    /// Degraded (subscription not confirmed): one waiter holds the polling
    /// role and polls every [`DEGRADED_POLL`]; the others wait, without a
    /// time bound of their own, until the role is handed on, so a degraded
    /// key costs the same whatever its number of waiters.
    async fn sleep<'w>(
        &'w self,
        (waiter, offer, deadline): (&'w Waiter, Option<&Offer<Notify>>, Option<Instant>),
        state: &mut WaitState<'w>,
        mut key_wake: Pin<&mut Notified<'w>>,
        mut reconnect: Pin<&mut Notified<'a>>,
    ) -> Woken {
        // Registered before the state is read, so a change right after the
        // read still wakes us.
        let moved = waiter.estimate_moved();
        let freed = waiter.poller_freed();
        state.saw_subscription(waiter.is_confirmed(), || waiter.take_poller_role());
        // The poller polls; the other degraded waiters are still bounded by
        // the holder's lease, so a hand-over of the role that goes astray
        // costs at most that, never a hang.
        let mut bound = if state.polls() {
            waiter.until_poll()
        } else {
            waiter.until_due().unwrap_or(PROBE_SLICE)
        };
        if let Some(left) = remaining(deadline) {
            bound = bound.min(left);
        }
        tokio::select! {
            biased;
            _ = granting(offer) => match offer.map_or(Handed::Pending, Offer::outcome) {
                Handed::Granted(fence, sent) => Woken::Granted(fence, sent),
                // The release's outcome is unknown, or the lock is free.
                Handed::Recheck => {
                    state.claim_rechecks();
                    woken_by_message()
                }
                // The claim ended without news for us (the lock went to
                // another client), or a stale permit.
                Handed::Pending => {
                    state.claim_ended(offer.is_some_and(Offer::is_claimed));
                    Woken::Again
                }
            },
            _ = &mut key_wake, if state.listens_to_key() => {
                key_wake.set(waiter.notified());
                state.message_arrived();
                woken_by_message()
            }
            _ = &mut reconnect => {
                // The subscriber task re-subscribed before waking us; if
                // that failed, the key is degraded and its poller
                // subscribes again beside its polling.
                reconnect.set(self.inner.registry.reconnected());
                state.reconnected();
                Woken::By(WakeCause::Reconnect)
            }
            outcome = state.resubscription(), if state.resubscribing() => {
                state.resubscribed(outcome);
                Woken::Again
            }
            _ = moved => {
                state.estimate_moved();
                Woken::Again
            }
            _ = freed, if state.awaits_role() => {
                state.role_freed(waiter.take_poller_role());
                Woken::Again
            }
            _ = tokio::time::sleep(bound) => self.recheck_due(waiter, deadline, state),
        }
    }

    /// The sleep's bound passed: the deadline, or the re-check is due
    /// without a message (holder died, message lost, this client's
    /// periodic re-check, or a degraded key's poll): one local waiter
    /// re-checks, the one that wins the claim.
    fn recheck_due<'w>(
        &'w self,
        waiter: &'w Waiter,
        deadline: Option<Instant>,
        state: &mut WaitState<'w>,
    ) -> Woken {
        if expired(deadline) {
            return Woken::Deadline;
        }
        let won = if state.polls() {
            if !state.resubscribing() && waiter.subscribe_due() {
                state.resubscribe(Box::pin(self.subscribe(waiter, deadline)));
            }
            waiter.claim_poll(DEGRADED_POLL)
        } else {
            waiter.claim_probe(PROBE_SLICE)
        };
        state.estimate_expired(won);
        Woken::By(WakeCause::Ttl)
    }
}

/// Completes when a release's claim on `offer` has news; never without an
/// offer (a semaphore call).
async fn granting(offer: Option<&Offer<Notify>>) {
    match offer {
        Some(o) => o.waker().notified().await,
        None => std::future::pending().await,
    }
}

/// When a hold began, as this process dates its lease: one that had `left`
/// of its `lease` when Redis answered a call sent at `sent` ends no later
/// than `left` after `sent`, so it began `lease - left` before `sent` (and
/// at `sent` when `left` is all of it). Dated so, a lease never outlasts
/// Redis's.
fn lease_began(sent: Instant, lease: Duration, left: Duration) -> Instant {
    sent.checked_sub(lease.saturating_sub(left)).unwrap_or(sent)
}

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// A release message woke the waiter (or a claim's outcome said to
/// re-check).
fn woken_by_message() -> Woken {
    tracing::trace!(target: "relaylock::hop", hop = "waiter_woken");
    Woken::By(WakeCause::Message)
}
