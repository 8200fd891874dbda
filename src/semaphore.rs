//! [`Semaphore`] and [`Permit`]: a counting semaphore shared by every client
//! of a Redis deployment, on the lock's machinery.
//!
//! # Guarantees
//!
//! * **Never more than the limit.** A caller is admitted only while the
//!   permits held (by anyone, its own included) plus those it asks for fit
//!   within ITS limit ([`SEM_ACQUIRE`](crate::scripts::SEM_ACQUIRE) decides
//!   in one script). When all callers give the same limit, no more than
//!   that are ever held. Callers that disagree are each checked by their
//!   own limit at their admission only: a caller with limit 8 may be
//!   admitted while a caller with limit 4 holds, bringing the total above 4.
//! * **Crashed holders give permits back by the server clock.** Every hold
//!   is its own entry with its own expiry in Redis time; a holder that is
//!   never heard from again loses its permits when its lease ends, judged by
//!   Redis, never by a client clock.
//! * **Fair.** Clients queue in Redis in FIFO order; once a client that
//!   needs 3 permits is first in the queue, a stream of 1-permit callers
//!   cannot pass it. Within a client, local waiters queue in FIFO order.
//! * **No herd.** A release that frees k permits reserves them for the
//!   queued clients they fit, telling each with one message, and each told
//!   client wakes one local waiter; the releasing client wakes at most k of
//!   its own. Every wait is bounded by the soonest expiry among the current
//!   holds (a lost message costs at most that), by a reconnect, and by the
//!   caller's deadline.
//!
//! The protocol and its safety argument: `docs/design-semaphore-rwlock.md`.

use crate::acquire::{self, Want};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::guard::{run_holding, Held, LockGuard};
use crate::inner::ClientInner;
use crate::options::SemaphoreOptions;
use crate::scripts::Names;
use std::fmt;
use std::sync::Arc;

/// A counting semaphore: at most `limit` permits held at once across every
/// client of the deployment. Made by [`LockClient::semaphore`](crate::LockClient::semaphore);
/// cheap to clone.
///
/// ```no_run
/// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
/// use std::time::Duration;
/// use relaylock::SemaphoreOptions;
///
/// // At most 8 concurrent calls to the payment provider, across all pods.
/// let sem = client.semaphore("payments", 8)?;
/// let permit = sem.acquire().await?;
/// // ... call the provider; pass permit.fencing_token() along if it checks ...
/// permit.release().await?;
///
/// let two = sem
///     .acquire_with(SemaphoreOptions::default().permits(2).wait(Duration::from_secs(1)))
///     .await?;
/// # drop(two); Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<ClientInner>,
    key: String,
    limit: u32,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("key", &self.key)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    pub(crate) fn new(inner: Arc<ClientInner>, key: String, limit: u32) -> Self {
        Semaphore { inner, key, limit }
    }

    /// The semaphore's key, as given.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The limit this handle admits by.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The Redis name of the semaphore's value (`<prefix>:4:{<key>}:sem`);
    /// its holds live in `...:sem:h` and `...:sem:t` (see docs/design.md).
    pub fn redis_key(&self) -> String {
        Names::semaphore(&self.inner.prefix, &self.key)
            .lock
            .to_string()
    }

    /// Take one permit, waiting as long as it takes. Same as
    /// [`acquire_with`](Self::acquire_with) with default options.
    ///
    /// # Errors
    ///
    /// As [`acquire_with`](Self::acquire_with).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire_with`](Self::acquire_with).
    pub async fn acquire(&self) -> Result<Permit> {
        self.acquire_with(SemaphoreOptions::default()).await
    }

    /// Take [`permits`](SemaphoreOptions::permits) permits at once
    /// (atomically: all or none), with a wait limit, a lease, a metrics name.
    ///
    /// ```no_run
    /// # async fn demo(sem: relaylock::Semaphore) -> relaylock::Result<()> {
    /// use std::time::Duration;
    /// use relaylock::{Error, SemaphoreOptions};
    ///
    /// let opts = SemaphoreOptions::default().permits(3).wait(Duration::from_secs(2));
    /// match sem.acquire_with(opts).await {
    ///     Ok(permit) => permit.release().await?,
    ///     Err(Error::Timeout { .. }) => { /* all taken: shed load */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// * [`Error::InvalidArgument`] for an empty or over-long key, a limit of
    ///   0, more permits than the limit, or a lease out of range, before
    ///   anything is sent;
    /// * [`Error::Timeout`] when the wait limit passes first, or
    ///   [`Error::Unavailable`] when it passes while Redis cannot be reached
    ///   (the wait is a deadline for the whole call, commands in flight
    ///   included);
    /// * [`Error::NotReplicated`] with
    ///   [`min_replicas`](SemaphoreOptions::min_replicas), as for
    ///   [`LockClient::lock_with`](crate::LockClient::lock_with);
    /// * [`Error::Redis`] for a connection error or a command timeout, and
    ///   [`Error::UnexpectedReply`] when the semaphore's name holds
    ///   something relaylock did not write.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. Dropping the future at any await point leaves no permit
    /// taken and no waiter registered: a wake-up it had received is passed
    /// to the next local waiter, and an acquire script in flight (which may
    /// have taken the permits without the reply reaching us) is followed by
    /// a release of its token in the background, which also voids the token
    /// so a delayed copy of the script can never take permits later.
    pub async fn acquire_with(&self, options: SemaphoreOptions) -> Result<Permit> {
        let want = self.want(&options);
        let guard = Box::pin(acquire::lock(&self.inner, &self.key, &options.lock, want)).await?;
        Ok(Permit { guard })
    }

    /// One attempt at one permit, never waits: `Ok(None)` when none is free
    /// for this caller (all taken, or other clients are queued first).
    ///
    /// # Errors
    ///
    /// As [`acquire_with`](Self::acquire_with), without [`Error::Timeout`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: an acquire script in flight when the future is dropped
    /// is followed by a release of its token in the background.
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.try_acquire_with(SemaphoreOptions::default()).await
    }

    /// [`try_acquire`](Self::try_acquire) with options (its wait limit is
    /// ignored).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn try_acquire_with(&self, options: SemaphoreOptions) -> Result<Option<Permit>> {
        let want = self.want(&options);
        let guard = Box::pin(acquire::try_lock(
            &self.inner,
            &self.key,
            &options.lock,
            want,
        ))
        .await?;
        Ok(guard.map(|guard| Permit { guard }))
    }

    /// Run `work` holding permits: acquire (with `options`), run the
    /// closure, release, and return the closure's value. If the permit is
    /// found lost while `work` runs, the closure's future is dropped at its
    /// next await point and the call fails with [`Error::LockLost`], as
    /// [`LockClient::with_lock`](crate::LockClient::with_lock) does.
    ///
    /// ```no_run
    /// # async fn demo(sem: relaylock::Semaphore) -> relaylock::Result<()> {
    /// use relaylock::SemaphoreOptions;
    ///
    /// let status = sem
    ///     .with_permit(SemaphoreOptions::default(), async |permit| {
    ///         // ... call the provider ...
    ///         permit.fencing_token() > 0
    ///     })
    ///     .await?;
    /// # let _ = status; Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`acquire_with`](Self::acquire_with), those of
    /// [`Permit::release`], and [`Error::LockLost`] when the permit was found
    /// lost while the closure ran.
    ///
    /// # Cancel safety
    ///
    /// As [`LockClient::with_lock`](crate::LockClient::with_lock): the
    /// permits are released in the background.
    pub async fn with_permit<F, T>(&self, options: SemaphoreOptions, work: F) -> Result<T>
    where
        F: AsyncFnOnce(&Permit) -> T,
    {
        run_holding(self.acquire_with(options).await?, work).await
    }

    /// Permits free right now by this handle's limit: the limit less the
    /// permits held or reserved for a queued client (holds expired by the
    /// server clock do not count). For display: the answer can be stale by
    /// the time it arrives.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] for a
    /// connection error or a command timeout; [`Error::UnexpectedReply`]
    /// when the name holds something relaylock did not write.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn available(&self) -> Result<u32> {
        self.inner.check_key(&self.key)?;
        let names = Names::semaphore(&self.inner.prefix, &self.key);
        let usage = self.inner.calls.sem_peek(&names).await?;
        let used = u32::try_from(usage.used).unwrap_or(u32::MAX);
        Ok(self.limit.saturating_sub(used))
    }

    /// Clients queued for permits right now (one entry per client, however
    /// many of its tasks wait). For display.
    ///
    /// # Errors
    ///
    /// As [`available`](Self::available).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn queued_clients(&self) -> Result<u64> {
        self.inner.check_key(&self.key)?;
        let names = Names::semaphore(&self.inner.prefix, &self.key);
        Ok(self.inner.calls.sem_peek(&names).await?.queued)
    }

    fn want(&self, options: &SemaphoreOptions) -> Want {
        Want::permits(options.permits, self.limit)
    }
}

/// Permits held on a [`Semaphore`].
///
/// It behaves as a [`LockGuard`] does: its own token and fencing token,
/// renewal by the client's watchdog when no lease was given,
/// [`lost`](Self::lost) and [`lost_token`](Self::lost_token), release in the
/// background when dropped.
///
/// The fencing token orders holds of the same semaphore (each is greater
/// than every earlier hold's), but up to `limit` holds are legitimately
/// concurrent, so a resource cannot use it to reject a concurrent holder,
/// only holds older than one it has seen.
#[must_use = "dropping a permit releases it (in the background)"]
pub struct Permit {
    guard: LockGuard,
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("key", &self.guard.key())
            .field("permits", &self.guard.permits())
            .field("fencing_token", &self.guard.fencing_token())
            .finish_non_exhaustive()
    }
}

impl Held for Permit {
    fn lock_guard(&self) -> &LockGuard {
        &self.guard
    }

    fn into_lock_guard(self) -> LockGuard {
        self.guard
    }
}

impl Permit {
    crate::guard::delegate_hold!("permits", "hold");

    /// How many permits this hold has.
    pub fn permits(&self) -> u32 {
        self.guard.permits()
    }

    /// Release the permits and tell the waiters they fit.
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] when the hold had expired (others may have held
    ///   the permits concurrently);
    /// * [`Error::Redis`] for a connection error or a command timeout: the
    ///   permits may stay taken until the lease ends (renewal has stopped).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases the permits in the
    /// background (a release that already ran is recognised, so they are
    /// released once).
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }
}
