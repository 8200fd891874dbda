//! [`LockGuard`]: proof of holding one lock, with its token, its fencing
//! token, extension and release.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use fred::clients::Client;
use metrics::SharedString;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::calls::Released;
use crate::conn_watch::{same_connection, Watch};
use crate::error::{Error, Result};
use crate::holds::{Hold, Lease};
use crate::inner::ClientInner;
use crate::metrics as m;
use crate::options::validate_lease;
use crate::scripts::{Kind, Names};
use crate::state::handoff::{Claim, Orphan};

/// A held lock.
///
/// A lock taken without an explicit lease is renewed by the client's
/// watchdog while the guard lives (see [`LockOptions::watchdog`](crate::LockOptions::watchdog)).
/// [`lost`](Self::lost) completes, and [`lost_token`](Self::lost_token) is
/// cancelled, as soon as the lock is known lost: a renewal (or
/// [`extend`](Self::extend)) found another token or no key, or the lease ran
/// out by this process's clock before a renewal got through.
/// [`is_held`](Self::is_held) answers without a round trip.
///
/// Release it with [`release`](Self::release) to learn whether it was still
/// held. Dropping a guard without releasing releases it in the background: the
/// drop never blocks and never panics (with no tokio runtime left to run the
/// release on, the lock simply expires at the end of its lease). A process
/// about to exit calls [`LockClient::shutdown`](crate::LockClient::shutdown)
/// first, which waits for those background releases (and releases what live
/// guards still hold).
///
/// ```no_run
/// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
/// use std::time::Duration;
///
/// let guard = client.lock("reports:daily").await?;
/// let fence = guard.fencing_token(); // strictly increasing per key: hand it to the resource
/// guard.extend(Duration::from_secs(60)).await?; // Err(LockLost) if it expired meanwhile
/// tokio::select! {
///     _ = guard.lost() => { /* stop: another owner may be running now */ }
///     _ = tokio::time::sleep(Duration::from_secs(1)) => { /* the work */ }
/// }
/// assert!(guard.is_held() || guard.lost_token().is_cancelled());
/// guard.release().await?;
/// # let _ = fence; Ok(()) }
/// ```
#[must_use = "dropping a guard releases the lock (in the background)"]
pub struct LockGuard {
    inner: Arc<ClientInner>,
    key: Str,
    names: Names,
    token: Str,
    fence: u64,
    /// Permits held: 1 for a lock.
    permits: u32,
    name: Option<SharedString>,
    acquired_at: Instant,
    lease: Duration,
    /// What is known about the lease; shared with the watchdog.
    lease_state: Arc<Lease>,
    /// Set once the watchdog looks after this lock (at once for a renewed
    /// lock, on first `lost`/`lost_token` for a fixed one).
    watched: OnceLock<()>,
    /// Where the guard is in its life; decides what dropping it does.
    state: State,
    /// Its id in the client's holds (see `crate::holds`), which the
    /// watchdog shares.
    hold: u64,
    /// The hold's span (`relaylock.hold`: key, fence, token), a child of
    /// the lock call's caller's span, open while the guard lives; its
    /// release and extends run in it.
    span: tracing::Span,
}

/// What an acquisition hands to [`LockGuard::new`].
pub(crate) struct Acquired {
    /// A slice of `names.lock` (see [`Names::key_in`]).
    pub(crate) key: Str,
    pub(crate) names: Names,
    pub(crate) token: Str,
    pub(crate) fence: u64,
    /// Permits taken: 1 for a lock.
    pub(crate) permits: u32,
    pub(crate) name: Option<SharedString>,
    /// When the acquire call that took the lock was sent.
    pub(crate) sent: Instant,
    pub(crate) lease: Duration,
    /// Renewed by the watchdog while the guard lives.
    pub(crate) renew: bool,
}

/// The life of a guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Held: dropping releases in the background.
    Held,
    /// `release()` is running: dropping its future releases in the
    /// background (the script may not have been sent yet).
    Releasing,
    /// Released: dropping does nothing more.
    Done,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &&*self.key)
            .field("token", &self.token)
            .field("fencing_token", &self.fence)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// The guard of a lock just acquired, registered in the client's
    /// holds; a renewed lock is registered with the watchdog at once.
    ///
    /// # Errors
    ///
    /// [`Error::Shutdown`] when the client's shutdown began: the hold is
    /// then released in the background.
    pub(crate) fn new(inner: Arc<ClientInner>, a: Acquired) -> Result<LockGuard> {
        let lease_state = Lease::new(a.sent, a.lease);
        let hold = Hold {
            names: a.names.clone(),
            token: a.token.clone(),
            fence: a.fence,
            permits: a.permits,
            name: a.name.clone(),
            lease: Arc::clone(&lease_state),
            watch: None,
        };
        let Some(hold) = inner.watchdog.register(hold, a.renew) else {
            release_in_background(inner, a.names, a.token, Some(a.fence), a.permits, None);
            return Err(Error::Shutdown);
        };
        let watched = OnceLock::new();
        if a.renew {
            let _ = watched.set(());
        }
        let span = tracing::info_span!(
            "relaylock.hold",
            key = &*a.key,
            fence = a.fence,
            token = &*a.token,
            outcome = tracing::field::Empty,
        );
        Ok(LockGuard {
            span,
            inner,
            key: a.key,
            names: a.names,
            token: a.token,
            fence: a.fence,
            permits: a.permits,
            name: a.name,
            acquired_at: a.sent,
            lease: a.lease,
            lease_state,
            watched,
            state: State::Held,
            hold,
        })
    }

    /// The key this guard locks, as given to `lock`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The token unique to this acquisition: this client's id
    /// ([`LockClient::client_id`](crate::LockClient::client_id)), `-`, and 16
    /// random hex digits. The lock's Redis value starts `"<token>:<fencing
    /// token>"`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this acquisition: strictly greater than that of
    /// every earlier acquisition of the same key, also across a Redis restart
    /// without persistence (it is derived from the server clock in
    /// microseconds). A resource that remembers the highest token it accepted
    /// and rejects lower ones is safe even against a holder that paused past
    /// its lease.
    pub fn fencing_token(&self) -> u64 {
        self.fence
    }

    /// Permits held (1 for a lock).
    pub(crate) fn permits(&self) -> u32 {
        self.permits
    }

    /// The lease the lock was acquired with.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// When the successful acquire call was sent: a lower bound of when the
    /// lease began.
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// Whether the lock is held as far as this process knows, without a
    /// round trip: not found lost, and the last confirmed lease (from
    /// acquisition, renewal or `extend`) has not run out by this process's
    /// clock, minus a safety margin of a tenth of the lease (at most 1 s).
    /// After an `extend` whose command may still reach Redis late (see
    /// [`extend`](Self::extend)), no confirmed lease counts longer than
    /// that extend's, for the rest of the guard's life: a fixed-lease guard
    /// extended further afterwards reports the lock lost when that shorter
    /// lease runs out.
    ///
    /// `true` is a local belief: a process paused past its lease learns
    /// otherwise only when it runs again. Fence the resource with
    /// [`fencing_token`](Self::fencing_token) for safety.
    pub fn is_held(&self) -> bool {
        self.lease_state.is_held()
    }

    /// Completes when the lock is known lost while this guard holds it: a
    /// renewal or [`extend`](Self::extend) found the key gone or holding
    /// another token, or the lease ran out by this process's clock (with the
    /// margin of [`is_held`](Self::is_held)) before a renewal got through,
    /// for example while Redis is unreachable. For a lock with a fixed lease
    /// it completes when that lease runs out. Never completes while the lock
    /// stays held.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future loses nothing; call it again.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// let guard = client.lock("jobs:compact").await?;
    /// tokio::select! {
    ///     _ = guard.lost() => return Err(relaylock::Error::LockLost { key: guard.key().into() }),
    ///     _ = async { /* the critical section */ } => {}
    /// }
    /// guard.release().await
    /// # }
    /// ```
    pub async fn lost(&self) {
        self.listen();
        self.lease_state.signal().cancelled().await
    }

    /// A token cancelled when the lock is known lost (as for
    /// [`lost`](Self::lost)), and also when this guard is released or dropped:
    /// hand it to tasks that must stop when the lock is no longer held.
    /// Cancelling the returned token yourself affects nothing else.
    pub fn lost_token(&self) -> CancellationToken {
        self.listen();
        self.lease_state.signal().child_token()
    }

    /// Make sure the watchdog fires this lock's signal when its lease runs out.
    fn listen(&self) {
        self.watched
            .get_or_init(|| self.inner.watchdog.listen(self.hold));
    }

    /// Fire the signal: the guard is going away. (It left the watchdog with
    /// its hold, before: see the callers.)
    fn close(&self) {
        self.lease_state.close();
    }

    /// Set the remaining lease to `lease` from now. For a lock the watchdog
    /// renews, later renewals use `lease` too.
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] (and [`lost`](Self::lost) fires) when the key no
    ///   longer holds this guard's token; the key is then left untouched;
    /// * [`Error::InvalidArgument`] for a lease out of range, before anything
    ///   is sent;
    /// * [`Error::Redis`] for a connection error or a command timeout: the
    ///   call may or may not have run. Safe to retry.
    ///
    /// # Cancel safety
    ///
    /// The command may run in Redis even when the future is dropped (or
    /// fails) before its reply arrives. So a SHORTER lease counts from the
    /// moment the call is sent: [`is_held`](Self::is_held) and
    /// [`lost`](Self::lost) never rely on the old, longer lease whatever
    /// happens to the call, and a longer one counts only once confirmed. A
    /// renewed lock's later renewals use `lease` only once the call
    /// succeeded. A call that fails, is dropped, or whose connection fred
    /// replaced while it ran may still reach Redis later, after commands sent
    /// since: from then on the guard counts no lease longer than `lease`
    /// (the watchdog renews more often to match), so it never reports the
    /// lock held after that late copy could have ended it.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.inner.check_open()?;
        let lease_ms = validate_lease(lease)?;
        let sent = Instant::now();
        // A shorter lease counts from now on, before the reply: the call may
        // run in Redis even if its outcome never reaches us.
        let generation = self.lease_state.record().extending(sent, lease);
        if self.watched.get().is_some() {
            self.inner.watchdog.replan();
        }
        let redis = self.inner.calls.redis();
        // Whether the command ran only on the connection it was sent on:
        // otherwise a copy may still be on a connection fred replaced (see
        // `Tracked`).
        let watch = same_connection(redis, &self.names.lock);
        let call = self
            .inner
            .calls
            .set_lease(redis, &self.names, &self.token, lease_ms);
        let reply = Tracked {
            call: Box::pin(call),
            lease: &self.lease_state,
            generation,
            leased: lease,
            watch,
            redis,
            clean: false,
        }
        .await?;
        match reply.as_slice() {
            [1] => {
                self.lease_state.record().extended(generation, sent, lease);
                if self.watched.get().is_some() {
                    // The watchdog planned with the old lease.
                    self.inner.watchdog.replan();
                }
                Ok(())
            }
            [0 | -1] => {
                self.lease_state
                    .mark_lost(|| m::lost(self.name.as_ref(), self.names.kind));
                Err(Error::LockLost {
                    key: self.key.to_string(),
                })
            }
            other => Err(Error::UnexpectedReply(format!("renew replied {other:?}"))),
        }
    }

    /// Release the lock and publish the release to waiters.
    ///
    /// Fails with [`Error::LockLost`] when the lease had already run out (so
    /// another owner may have run its critical section concurrently); the key
    /// of a new owner is never touched. A release replayed by the client after
    /// a lost reply is recognised as ours and does not report a false loss,
    /// unless 32 other releases of the key came between the two (hand-overs
    /// faster than fred's reconnect; see docs/design.md, "Release").
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] when the lease had run out (another owner may
    ///   have run concurrently);
    /// * [`Error::Redis`] for a connection error or a command timeout: the
    ///   lock may still be held until its lease ends (renewal has stopped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases the lock in the
    /// background, as dropping the guard does (a release that already ran is
    /// recognised, so the lock is released once).
    pub async fn release(self) -> Result<()> {
        // A shutdown waits for this release; the token is taken before the
        // guard is moved in, so that it is let go after the guard's drop
        // (which releases in the background if this future is dropped).
        let _busy = self.inner.background.token();
        let mut this = self;
        let span = this.span.clone();
        let outcome = tracing::Instrument::instrument(this.release_now(), span.clone()).await;
        if !span.is_disabled() {
            span.record(
                "outcome",
                match &outcome {
                    Ok(()) => "released",
                    Err(Error::LockLost { .. }) => "lost",
                    Err(_) => "error",
                },
            );
        }
        outcome
    }

    /// The body of [`release`](Self::release).
    async fn release_now(&mut self) -> Result<()> {
        let ours = self.inner.watchdog.holds.remove(self.hold);
        self.close();
        if !ours {
            // The shutdown took the hold and releases it.
            self.state = State::Done;
            return Err(Error::Shutdown);
        }
        // Dropped (or unwound) from here until the outcome is known, `Drop`
        // releases in the background (a repeated release is recognised as
        // ours).
        self.state = State::Releasing;
        m::held(
            self.name.as_ref(),
            self.names.kind,
            self.acquired_at.elapsed(),
        );
        let outcome = release(
            &self.inner,
            &self.names,
            &self.token,
            Some(self.fence),
            self.permits,
        )
        .await;
        self.state = State::Done;
        account(
            &self.inner,
            self.name.as_ref(),
            &self.names,
            Some(self.fence),
            &outcome,
            Some(&self.lease_state),
        );
        match outcome? {
            Released::Freed | Released::HandedOver | Released::Granted(_) | Released::Already => {
                Ok(())
            }
            Released::NotOurs => Err(Error::LockLost {
                key: self.key.to_string(),
            }),
        }
    }
}

/// An `extend` call's future, which reports to the lease record when it
/// ends, whatever its outcome (see `LeaseRecord::extend_ended`): and whether
/// a copy of its command may still reach Redis after later commands. That
/// is so unless its reply came back with no new connection announced since
/// before it was sent: a command fred wrote on a connection it then replaced
/// (a timeout, an unresponsive or broken connection) can still be delivered
/// later, and one that got no reply may run at any time.
struct Tracked<'a, F> {
    call: Pin<Box<F>>,
    lease: &'a Lease,
    generation: u64,
    /// The lease the call sets.
    leased: Duration,
    watch: Watch,
    redis: &'a Client,
    /// The reply arrived, and the connection stayed the same.
    clean: bool,
}

impl<F: Future<Output = Result<T>>, T> Future for Tracked<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        let out = this.call.as_mut().poll(cx);
        if let Poll::Ready(Ok(_)) = &out {
            this.clean = this.watch.unchanged(this.redis);
        }
        out
    }
}

impl<F> Drop for Tracked<'_, F> {
    fn drop(&mut self) {
        // Every command the call queued was queued before now. A success
        // settles the record right after this (`Lease::extended`).
        let stray = (!self.clean).then_some(self.leased);
        self.lease
            .record()
            .extend_ended(self.generation, Instant::now(), stray);
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.state == State::Done {
            return;
        }
        // Held from before the hold leaves the registry until the release
        // is spawned: a shutdown in between waits for it.
        let _busy = self.inner.background.token();
        // Releasing: `release()` already took the hold out of the registry.
        let held = self.state == State::Held;
        if held && !self.inner.watchdog.holds.remove(self.hold) {
            // The shutdown took the hold and releases it.
            self.close();
            return;
        }
        // The release first: a panic in what follows (the metrics recorder
        // is user code) must not leave the lock held.
        let names = std::mem::replace(&mut self.names, Names::taken());
        let kind = names.kind;
        let name = self.name.take();
        release_in_background(
            Arc::clone(&self.inner),
            names,
            std::mem::take(&mut self.token),
            Some(self.fence),
            self.permits,
            Some((name.clone(), Arc::clone(&self.lease_state))),
        );
        if held {
            self.close();
            m::held(name.as_ref(), kind, self.acquired_at.elapsed());
        }
    }
}

/// Count a release's outcome; a loss counts only if nobody counted it before
/// (the watchdog, `extend`).
///
/// A loss found while the lease should still run (by this process's
/// clock) means the value vanished under the hold (an eviction, a
/// `FLUSHALL`, a `DEL`): every waiting client is told to re-check
/// ([`Calls::value_vanished`](crate::calls::Calls::value_vanished)).
pub(crate) fn account(
    inner: &ClientInner,
    name: Option<&SharedString>,
    names: &Names,
    fence: Option<u64>,
    outcome: &Result<Released>,
    lease: Option<&Lease>,
) {
    let kind = names.kind;
    match outcome {
        Ok(Released::Freed | Released::HandedOver | Released::Granted(_) | Released::Already) => {
            m::released(name, kind)
        }
        Ok(Released::NotOurs) => match lease {
            Some(lease) => {
                let early = Instant::now() < lease.record().safe_until();
                // Only the first to find the loss tells (the watchdog may
                // have, before this release).
                if lease.mark_lost(|| m::lost(name, kind)) && early {
                    inner.calls.value_vanished(names, fence);
                }
            }
            None => m::lost(name, kind),
        },
        Err(_) => {}
    }
}

/// Release `token`: the release script, queueing this client again when it
/// still has local waiters (the registry tracks that until the outcome is
/// known, see `Registry::requeue`). `fence` is `None` for an acquisition
/// whose reply never arrived.
///
/// The releasing client serves its own local waiters: no message tells them
/// (the script publishes only to another client it reserves the lock for).
///
/// * With `fence` known and a local waiter offering to take the lock
///   (`crate::state::handoff`), the release names that waiter's token, and the
///   script gives it the lock at once when no other client is queued: the
///   hand-over costs this one request. The waiter gets its fencing token
///   through its slot; if it left meanwhile, the lock granted to it is
///   released in the background. Any other outcome sends it to re-check
///   (or, when the lock went to another client, back to sleep). If it left,
///   one other local waiter is woken instead when the lock may be free (the
///   rule below).
/// * Without such a waiter, one local waiter, if any waits, is woken when the
///   reply says the lock is free, when the release had already run (a replay
///   whose first reply was lost), and when the outcome is unknown (an error:
///   it may have run).
///
/// Dropped before its reply, a claimed waiter re-checks (the acquire script
/// finds a lock granted to its token); if that waiter left too, its token is
/// released in the background as an abandoned acquisition.
///
/// A semaphore hold (`names.kind`) is released by [`release_permits`].
pub(crate) async fn release(
    inner: &Arc<ClientInner>,
    names: &Names,
    token: &Str,
    fence: Option<u64>,
    permits: u32,
) -> Result<Released> {
    if names.kind.counted() {
        return release_permits(inner, names, token, fence, permits).await;
    }
    let registry = &inner.registry;
    // During a shutdown the local waiters are leaving: no hand-over to one
    // (it would make a new hold), and no requeue.
    let closing = inner.closing.is_cancelled();
    let requeued = requeue(inner, names);
    // The client stays queued after giving the lock to `next` only if other
    // local tasks still wait (`keep`: `next`'s own task is not the only one).
    let claim = fence
        .filter(|_| !closing)
        .and_then(|_| registry.claim(&names.channel));
    let (claim, keep) = match claim {
        Some((claim, others)) => (Some(claim), others),
        None => (None, false),
    };
    let mut claim = ClaimGuard {
        claim,
        inner,
        names,
    };
    let sent = Instant::now();
    let outcome = {
        let next = claim
            .claim
            .as_ref()
            .map(|c| (c.token(), c.lease_ms(), keep));
        inner
            .calls
            .release(
                names,
                token,
                fence,
                registry.client_id(),
                requeued.is_some(),
                next,
                true,
            )
            .await
    };
    let outcome = outcome.map(|(released, standby)| {
        if standby {
            // Queued first behind the client the lock is reserved for:
            // should that client not take it, it lapses, and a probe after
            // the grace takes it (a stand-by that is another client is told
            // by the release's message).
            registry.reserved_here(&names.channel);
        }
        released
    });
    match claim.claim.take() {
        Some(c) => {
            let next = Str::from(c.token());
            let orphan = match &outcome {
                Ok(Released::Granted(f)) => c.granted(*f, sent),
                Ok(Released::HandedOver) => c.not_granted(false),
                Ok(Released::Freed | Released::NotOurs) => c.not_granted(true),
                // A replay: the first run may have given the lock to `next`
                // (whose reply was lost), so this counts as unknown (found in
                // review: a waiter that left kept the lock for its lease).
                Ok(Released::Already) | Err(_) => c.unknown(),
            };
            // The claimed waiter left: the wake-up it would have passed on
            // goes to another local waiter, by the rule without a claim (not
            // after a reservation for another client, nor a loss). A lock
            // granted to it is released below, and that release serves the
            // next waiter.
            let free = matches!(outcome, Ok(Released::Freed | Released::Already) | Err(_));
            if free && matches!(orphan, Orphan::Left | Orphan::Unknown) {
                registry.wake_one_if_waiting(&names.channel);
            }
            release_orphan(inner, names, next, orphan);
        }
        // Also without a requeue: a local waiter may have arrived since, and
        // its try, run before the release, queued this client.
        None => {
            if matches!(outcome, Ok(Released::Freed | Released::Already) | Err(_)) {
                registry.wake_one_if_waiting(&names.channel);
            }
        }
    }
    drop(requeued);
    outcome
}

/// The requeue of a release (see `Registry::requeue`), none during a
/// shutdown: the local waiters are leaving.
fn requeue(inner: &ClientInner, names: &Names) -> Option<crate::registry::Requeue> {
    if inner.closing.is_cancelled() {
        return None;
    }
    inner.registry.requeue(&names.channel)
}

/// Release a semaphore hold of `permits` permits (`fence` `None`: an
/// acquisition abandoned in flight, whose token is voided too). The script
/// queues this client again when it still has local waiters (with the
/// largest need among them), and reserves freed permits for the queued
/// clients in order, telling each other client with one message. This
/// client's own waiters are woken here: one when the script reserved
/// permits for this client (it takes them, and wakes the next if some are
/// left), up to `permits` when the permits are simply free (or the outcome
/// is unknown, or a replay), none when clients ahead of it wait. So a
/// release that frees k permits wakes at most k waiters in this client, and
/// one per other client it reserved for.
async fn release_permits(
    inner: &Arc<ClientInner>,
    names: &Names,
    token: &str,
    fence: Option<u64>,
    permits: u32,
) -> Result<Released> {
    let registry = &inner.registry;
    let requeued = requeue(inner, names);
    let need = requeued.as_ref().map(|r| r.need());
    let outcome = inner
        .calls
        .sem_release(
            names,
            token,
            fence,
            registry.role_id(names.kind),
            need.flatten(),
            true,
        )
        .await;
    let wake = match &outcome {
        Ok((_, wake, _)) => (*wake).min(permits.max(1)),
        Err(_) => permits.max(1),
    };
    // No more than wait here (a write frees a billion permits), and one
    // writer: a write reservation serves one (found in review: every local
    // writer woke for it).
    let mut wake = wake as usize;
    if names.kind == Kind::Write {
        wake = wake.min(1);
    }
    registry.wake_up_to(&names.channel, wake);
    if matches!(outcome, Ok((_, _, true))) {
        // Reserved for this client: should no woken waiter take it, it
        // lapses, and a probe after the grace hands it on.
        registry.reserved_here(&names.channel);
    }
    drop(requeued);
    outcome.map(|(released, _, _)| released)
}

/// A lock granted to a local waiter that left: release it (in the
/// background), or its token as an abandoned acquisition.
pub(crate) fn release_orphan(inner: &Arc<ClientInner>, names: &Names, token: Str, orphan: Orphan) {
    let fence = match orphan {
        Orphan::None | Orphan::Left => return,
        Orphan::Held(fence) => Some(fence),
        Orphan::Unknown => None,
    };
    release_in_background(Arc::clone(inner), names.clone(), token, fence, 1, None);
}

/// A release's claim on a local waiter, resolved as an unknown outcome if
/// the release is dropped before its reply.
struct ClaimGuard<'a> {
    claim: Option<Claim<Notify>>,
    inner: &'a Arc<ClientInner>,
    names: &'a Names,
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        if let Some(c) = self.claim.take() {
            let next = Str::from(c.token());
            let orphan = c.unknown();
            if orphan == Orphan::Unknown {
                // As for an unknown outcome in `release`: the waiter that
                // left would have passed its wake-up on.
                self.inner.registry.wake_one_if_waiting(&self.names.channel);
            }
            release_orphan(self.inner, self.names, next, orphan);
        }
    }
}

pub(crate) type Report = (Option<SharedString>, Arc<Lease>);

/// Release `token` without waiting for the outcome: for a dropped guard
/// (`report` given) and for an acquisition its caller abandoned (in flight:
/// `fence` None; or during `WAIT`), which records no metrics because it was
/// never reported as acquired.
pub(crate) fn release_in_background(
    inner: Arc<ClientInner>,
    names: Names,
    token: Str,
    fence: Option<u64>,
    permits: u32,
    report: Option<Report>,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            key = %names.lock,
            "relaylock: lock dropped outside a tokio runtime; it stays held until its lease ends"
        );
        return;
    };
    let background = inner.background.clone();
    // Moved into the future, so dropped with it even if it never ran: when
    // the runtime ends first (a `main` that returned without `shutdown()`),
    // it says so; the lock stays.
    let unfinished = Unfinished(names.lock.clone(), false);
    background.spawn_on(
        async move {
            let outcome = release(&inner, &names, &token, fence, permits).await;
            unfinished.finished();
            match (&outcome, report) {
                (Err(e), _) => tracing::warn!(key = %names.lock, error = %e,
                    "relaylock: background release failed; the lock stays held until its lease ends"),
                (Ok(Released::Freed | Released::HandedOver | Released::Granted(_)), None) => {
                    tracing::debug!(key = %names.lock,
                    "relaylock: released an acquisition whose caller went away")
                }
                (Ok(_), None) => {}
                (Ok(_), Some((name, lease))) => {
                    account(&inner, name.as_ref(), &names, fence, &outcome, Some(&lease))
                }
            }
        },
        &handle,
    );
}

/// A background release's future, warning when it is dropped before it
/// finished: the tokio runtime ended first (a `main` that returned right
/// after dropping a guard), and the key stays held until its lease ends.
struct Unfinished(Str, bool);

impl Unfinished {
    fn finished(mut self) {
        self.1 = true;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        // Finished, or unwinding from a panic in the release (a metrics
        // recorder): not the runtime's end.
        if self.1 || std::thread::panicking() {
            return;
        }
        tracing::warn!(
            key = %self.0,
            "relaylock: the runtime ended before this lock's release could run; it stays held until its lease ends (call LockClient::shutdown() before the runtime ends, or before main returns)"
        );
    }
}

/// A hold that is a [`LockGuard`] underneath: the lock's own guard, a
/// semaphore's `Permit`, a read-write lock's `ReadGuard` and `WriteGuard`.
pub(crate) trait Held {
    fn lock_guard(&self) -> &LockGuard;
    fn into_lock_guard(self) -> LockGuard;
}

impl Held for LockGuard {
    fn lock_guard(&self) -> &LockGuard {
        self
    }

    fn into_lock_guard(self) -> LockGuard {
        self
    }
}

/// Run `work` holding `held`, then release it, for every `with_*` call:
/// if the hold is found lost first, the closure's future is dropped at its
/// next await point and the call fails with [`Error::LockLost`]; dropping
/// `held` then releases in the background, in case the key is still ours
/// (lost by the local clock alone).
pub(crate) async fn run_holding<H, F, T>(held: H, work: F) -> Result<T>
where
    H: Held,
    F: AsyncFnOnce(&H) -> T,
{
    let outcome = {
        let work = work(&held);
        tokio::select! {
            biased;
            _ = held.lock_guard().lost() => None,
            value = work => Some(value),
        }
    };
    match outcome {
        Some(value) => held.into_lock_guard().release().await.map(|()| value),
        // The shutdown released the hold: not a loss.
        None if held.lock_guard().inner.closing.is_cancelled() => Err(Error::Shutdown),
        None => Err(Error::LockLost {
            key: held.lock_guard().key().to_owned(),
        }),
    }
}

/// The accessors every hold type that wraps a [`LockGuard`] (a semaphore's
/// `Permit`, a read-write lock's `ReadGuard` and `WriteGuard`) shares, with
/// their documentation: `$what` names what is held ("permits", "read
/// lock"), `$hold` one hold of it. The type must have a `guard: LockGuard`
/// field.
macro_rules! delegate_hold {
    ($what:literal, $hold:literal) => {
        /// The key, as given.
        pub fn key(&self) -> &str {
            self.guard.key()
        }

        /// The token unique to this acquisition: the client's id, `-`, and
        /// 16 random hex digits.
        pub fn token(&self) -> &str {
            self.guard.token()
        }

        #[doc = concat!("The fencing token of this ", $hold, ": greater than that of every")]
        /// earlier hold of the same key, also across a Redis restart without
        /// persistence (see [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)).
        pub fn fencing_token(&self) -> u64 {
            self.guard.fencing_token()
        }

        #[doc = concat!("The lease the ", $what, " were acquired with.")]
        pub fn lease(&self) -> std::time::Duration {
            self.guard.lease()
        }

        /// When the successful acquire call was sent.
        pub fn acquired_at(&self) -> std::time::Instant {
            self.guard.acquired_at()
        }

        #[doc = concat!("Whether the ", $what, " are held as far as this process knows, without")]
        /// a round trip (see [`LockGuard::is_held`](crate::LockGuard::is_held)).
        pub fn is_held(&self) -> bool {
            self.guard.is_held()
        }

        #[doc = concat!("Completes when the ", $what, " are known lost while held: a renewal or")]
        #[doc = concat!("[`extend`](Self::extend) found the ", $hold, " expired or gone, or the lease")]
        /// ran out by this process's clock before a renewal got through.
        ///
        /// # Cancel safety
        ///
        /// Cancel-safe: dropping the future loses nothing; call it again.
        pub async fn lost(&self) {
            self.guard.lost().await
        }

        #[doc = concat!("A token cancelled when the ", $what, " are known lost, or this ", $hold)]
        /// is released or dropped (see [`LockGuard::lost_token`](crate::LockGuard::lost_token)).
        pub fn lost_token(&self) -> tokio_util::sync::CancellationToken {
            self.guard.lost_token()
        }

        #[doc = concat!("Set the ", $hold, "'s remaining lease to `lease` from now, by the server")]
        /// clock. For a renewed hold, later renewals use `lease` too.
        ///
        /// # Errors
        ///
        #[doc = concat!("* [`Error::LockLost`](crate::Error::LockLost) (and [`lost`](Self::lost) fires) when the ", $hold)]
        ///   had already expired: a renewal never takes it back;
        /// * [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a lease out of range;
        /// * [`Error::Redis`](crate::Error::Redis) for a connection error or a command timeout: the
        ///   call may or may not have run. Safe to retry.
        ///
        /// # Cancel safety
        ///
        /// As [`LockGuard::extend`](crate::LockGuard::extend): a shorter lease counts from the
        /// moment the call is sent, a longer one only once confirmed.
        pub async fn extend(&self, lease: std::time::Duration) -> crate::Result<()> {
            self.guard.extend(lease).await
        }
    };
}
pub(crate) use delegate_hold;
