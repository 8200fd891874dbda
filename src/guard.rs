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
use tokio_util::sync::CancellationToken;

use crate::calls::Released;
use crate::conn_watch::{same_connection, Watch};
use crate::error::{Error, Result};
use crate::hold_id::HoldId;
use crate::holds::{Hold, Lease};
use crate::inner::ClientInner;
use crate::metrics as m;
use crate::options::validate_lease;
use crate::release::{account, release, release_in_background};

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
    /// Its `fence` is `Some`: a guard is made from an acquire reply.
    id: HoldId,
    name: Option<SharedString>,
    acquired_at: Instant,
    lease: Duration,
    /// What is known about the lease; shared with the watchdog.
    lease_state: Arc<Lease>,
    /// Set once the watchdog looks after this lock (at once for a renewed
    /// lock, on first `lost`/`lost_token` for a fixed one).
    watched: OnceLock<()>,
    /// Where the guard is in its life; decides what dropping it does.
    state: GuardState,
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
    /// The hold, its fence known.
    pub(crate) id: HoldId,
    pub(crate) name: Option<SharedString>,
    /// When the acquire call that took the lock was sent.
    pub(crate) sent: Instant,
    pub(crate) lease: Duration,
    /// Renewed by the watchdog while the guard lives.
    pub(crate) renew: bool,
}

/// The life of a guard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GuardState {
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
            .field("token", &self.id.token)
            .field("fencing_token", &self.fencing_token())
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
            id: a.id.clone(),
            name: a.name.clone(),
            lease: Arc::clone(&lease_state),
            watch: None,
        };
        let Some(hold) = inner.watchdog.register(hold, a.renew) else {
            release_in_background(inner, a.id, None);
            return Err(Error::Shutdown);
        };
        let watched = OnceLock::new();
        if a.renew {
            let _ = watched.set(());
        }
        let span = tracing::info_span!(
            "relaylock.hold",
            key = &*a.key,
            fence = a.id.fence,
            token = &*a.id.token,
            outcome = tracing::field::Empty,
        );
        Ok(LockGuard {
            span,
            inner,
            key: a.key,
            id: a.id,
            name: a.name,
            acquired_at: a.sent,
            lease: a.lease,
            lease_state,
            watched,
            state: GuardState::Held,
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
        &self.id.token
    }

    /// The fencing token of this acquisition: strictly greater than that of
    /// every earlier acquisition of the same key, also across a Redis restart
    /// without persistence (it is derived from the server clock in
    /// microseconds). A resource that remembers the highest token it accepted
    /// and rejects lower ones is safe even against a holder that paused past
    /// its lease.
    pub fn fencing_token(&self) -> u64 {
        self.id.fence.unwrap_or_default()
    }

    /// Permits held (1 for a lock).
    pub(crate) fn permits(&self) -> u32 {
        self.id.permits
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
        let watch = same_connection(redis, &self.id.names.lock);
        let call = self
            .inner
            .calls
            .set_lease(redis, &self.id.names, &self.id.token, lease_ms);
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
                    .mark_lost(|| m::lost(self.name.as_ref(), self.id.names.kind));
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

    /// Take the hold out for a release its caller sends (a multi-key
    /// lock's, one call per slot group): it leaves the watchdog and the
    /// client's holds, [`lost`](Self::lost) fires, and dropping the guard
    /// does nothing more. With it, its lease state, for the release's
    /// outcome. `None` when the shutdown took the hold (and releases it).
    pub(crate) fn detach(&mut self) -> Option<(HoldId, Arc<Lease>)> {
        if self.state != GuardState::Held {
            return None;
        }
        let ours = self.inner.watchdog.holds.remove(self.hold);
        self.close();
        self.state = GuardState::Done;
        ours.then(|| (self.id.take(), Arc::clone(&self.lease_state)))
    }

    /// The body of [`release`](Self::release).
    async fn release_now(&mut self) -> Result<()> {
        let ours = self.inner.watchdog.holds.remove(self.hold);
        self.close();
        if !ours {
            // The shutdown took the hold and releases it.
            self.state = GuardState::Done;
            return Err(Error::Shutdown);
        }
        // Dropped (or unwound) from here until the outcome is known, `Drop`
        // releases in the background (a repeated release is recognised as
        // ours).
        self.state = GuardState::Releasing;
        m::held(
            self.name.as_ref(),
            self.id.names.kind,
            self.acquired_at.elapsed(),
        );
        let outcome = release(&self.inner, &self.id).await;
        self.state = GuardState::Done;
        account(
            &self.inner,
            self.name.as_ref(),
            &self.id,
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
        if self.state == GuardState::Done {
            return;
        }
        // Held from before the hold leaves the registry until the release
        // is spawned: a shutdown in between waits for it.
        let _busy = self.inner.background.token();
        // Releasing: `release()` already took the hold out of the registry.
        let held = self.state == GuardState::Held;
        if held && !self.inner.watchdog.holds.remove(self.hold) {
            // The shutdown took the hold and releases it.
            self.close();
            return;
        }
        // The release first: a panic in what follows (the metrics recorder
        // is user code) must not leave the lock held.
        let hold = self.id.take();
        let kind = hold.names.kind;
        let name = self.name.take();
        let report = (name.clone(), Arc::clone(&self.lease_state));
        release_in_background(Arc::clone(&self.inner), hold, Some(report));
        if held {
            self.close();
            m::held(name.as_ref(), kind, self.acquired_at.elapsed());
        }
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
    let outcome = until_lost(held.lock_guard().lost(), work(&held)).await;
    match outcome {
        Some(value) => held.into_lock_guard().release().await.map(|()| value),
        None => {
            let guard = held.lock_guard();
            Err(lost_while_working(&guard.inner, guard.key()))
        }
    }
}

/// Run `work` until it returns, or until `lost` completes first: then
/// `None`, and the work's future is dropped at its next await point. What
/// every `with_*` call (a lock's, a multi-key lock's, a leadership's) runs
/// its closure in.
pub(crate) async fn until_lost<T>(
    lost: impl Future<Output = ()>,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        biased;
        () = lost => None,
        value = work => Some(value),
    }
}

/// The error of a `with_*` call whose hold on `key` was found lost while
/// its closure ran: [`Error::Shutdown`] when the client's shutdown released
/// it (not a loss), else [`Error::LockLost`].
pub(crate) fn lost_while_working(inner: &ClientInner, key: &str) -> Error {
    if inner.closing.is_cancelled() {
        return Error::Shutdown;
    }
    Error::LockLost {
        key: key.to_owned(),
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
        #[doc = concat!("* [`Error::LockLost`](crate::error::Error::LockLost) (and [`lost`](Self::lost) fires) when the ", $hold)]
        ///   had already expired: a renewal never takes it back;
        /// * [`Error::InvalidArgument`](crate::error::Error::InvalidArgument) for a lease out of range;
        /// * [`Error::Redis`](crate::error::Error::Redis) for a connection error or a command timeout: the
        ///   call may or may not have run. Safe to retry.
        ///
        /// # Cancel safety
        ///
        /// As [`LockGuard::extend`](crate::LockGuard::extend): a shorter lease counts from the
        /// moment the call is sent, a longer one only once confirmed.
        pub async fn extend(&self, lease: std::time::Duration) -> crate::error::Result<()> {
            self.guard.extend(lease).await
        }
    };
}
pub(crate) use delegate_hold;
