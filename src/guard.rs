//! [`LockGuard`]: proof of holding one lock, with its token, its fencing
//! token, extension and release.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::types::Value;
use metrics::SharedString;

use crate::client::Inner;
use crate::error::{Error, Result};
use crate::metrics as m;
use crate::options::validate_lease;
use crate::scripts::{Names, HANDOFF_GRACE_MS, RING_CHARS, SIDE_RETENTION_MS};

/// A held lock.
///
/// Release it with [`release`](Self::release) to learn whether it was still
/// held. Dropping a guard without releasing releases it in the background: the
/// drop never blocks and never panics (with no tokio runtime left to run the
/// release on, the lock simply expires at the end of its lease).
///
/// ```no_run
/// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
/// use std::time::Duration;
///
/// let guard = client.lock("reports:daily").await?;
/// let fence = guard.fencing_token(); // strictly increasing per key: hand it to the resource
/// guard.extend(Duration::from_secs(60)).await?; // Err(LockLost) if it expired meanwhile
/// guard.release().await?;
/// # let _ = fence; Ok(()) }
/// ```
pub struct LockGuard {
    pub(crate) inner: Arc<Inner>,
    pub(crate) key: String,
    pub(crate) names: Names,
    pub(crate) token: String,
    pub(crate) fence: u64,
    pub(crate) name: Option<SharedString>,
    pub(crate) acquired_at: Instant,
    pub(crate) lease: Duration,
    /// Released (or known lost): dropping does nothing more.
    pub(crate) done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.key)
            .field("token", &self.token)
            .field("fencing_token", &self.fence)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    /// The key this guard locks, as given to `lock`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The token unique to this acquisition (a random UUID). The lock's Redis
    /// value is `"<token>:<fencing token>"`.
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

    /// The lease the lock was acquired with.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// When the acquisition was sent (a lower bound of when the lease began,
    /// so `acquired_at() + lease()` is a safe local estimate of its end).
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }

    /// Set the remaining lease to `lease` from now.
    ///
    /// Fails with [`Error::LockLost`] when the lock no longer holds this
    /// guard's token; the key is then left untouched. Safe to retry.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let lease_ms = validate_lease(lease)?;
        let keys = vec![self.names.lock.as_str(), self.names.side.as_str()];
        let args: Vec<Value> = vec![
            self.token.as_str().into(),
            (lease_ms as i64).into(),
            ((lease_ms + SIDE_RETENTION_MS) as i64).into(),
        ];
        let script = &self.inner.scripts.extend;
        let reply: i64 = self
            .inner
            .bounded(script.evalsha_with_reload(&self.inner.redis, keys, args))
            .await?;
        match reply {
            1 => Ok(()),
            0 => {
                m::lost(self.name.as_ref());
                Err(Error::LockLost)
            }
            other => Err(Error::UnexpectedReply(format!("extend replied {other}"))),
        }
    }

    /// Release the lock and publish the release to waiters.
    ///
    /// Fails with [`Error::LockLost`] when the lease had already run out (so
    /// another owner may have run its critical section concurrently); the key
    /// of a new owner is never touched. A release replayed by the client after
    /// a lost reply is recognised as ours and does not report a false loss.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        m::held(self.name.as_ref(), self.acquired_at.elapsed());
        let outcome = release(&self.inner, &self.names, &self.token, Some(self.fence)).await;
        account(self.name.as_ref(), &outcome);
        match outcome? {
            Released::Now | Released::Already => Ok(()),
            Released::NotOurs => Err(Error::LockLost),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        m::held(self.name.as_ref(), self.acquired_at.elapsed());
        let names = std::mem::replace(&mut self.names, Names::new("", ""));
        release_in_background(
            Arc::clone(&self.inner),
            names,
            std::mem::take(&mut self.token),
            Some(self.fence),
            self.name.take(),
        );
    }
}

/// What the release script found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Deleted our key and published.
    Now,
    /// Our key was already released by an earlier (replayed) call.
    Already,
    /// The key no longer held our token.
    NotOurs,
}

fn account(name: Option<&SharedString>, outcome: &Result<Released>) {
    match outcome {
        Ok(Released::Now | Released::Already) => m::released(name),
        Ok(Released::NotOurs) => m::lost(name),
        Err(_) => {}
    }
}

/// Run the release script for `token`. `fence` is `None` for an acquisition
/// whose reply never arrived (the script reads the fence from the value).
pub(crate) async fn release(
    inner: &Inner,
    names: &Names,
    token: &str,
    fence: Option<u64>,
) -> Result<Released> {
    let void = names.void(token);
    let keys = vec![
        names.lock.as_str(),
        names.side.as_str(),
        void.as_str(),
        names.queue.as_str(),
    ];
    // With local waiters left, this client queues again behind the others.
    let registry = &inner.registry;
    let requeue = if registry.has_waiters(&names.channel) {
        registry.client_id()
    } else {
        ""
    };
    let args: Vec<Value> = vec![
        token.into(),
        fence.map(|f| f.to_string()).unwrap_or_default().into(),
        names.channel.as_str().into(),
        (SIDE_RETENTION_MS as i64).into(),
        (RING_CHARS as i64).into(),
        requeue.into(),
        (HANDOFF_GRACE_MS as i64).into(),
    ];
    let script = &inner.scripts.release;
    let reply: i64 = inner
        .bounded(script.evalsha_with_reload(&inner.redis, keys, args))
        .await?;
    match reply {
        1 => Ok(Released::Now),
        2 => Ok(Released::Already),
        0 => Ok(Released::NotOurs),
        other => Err(Error::UnexpectedReply(format!("release replied {other}"))),
    }
}

/// Release `token` without waiting for the outcome: for a dropped guard
/// (`fence` known) and for an acquisition abandoned in flight (`fence` None,
/// and no metrics: it was never reported as acquired).
pub(crate) fn release_in_background(
    inner: Arc<Inner>,
    names: Names,
    token: String,
    fence: Option<u64>,
    name: Option<SharedString>,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            key = %names.lock,
            "relaylock: lock dropped outside a tokio runtime; it stays held until its lease ends"
        );
        return;
    };
    handle.spawn(async move {
        let outcome = release(&inner, &names, &token, fence).await;
        match (&outcome, fence) {
            (Err(e), _) => tracing::warn!(key = %names.lock, error = %e,
                "relaylock: background release failed; the lock stays held until its lease ends"),
            (Ok(Released::Now), None) => tracing::debug!(key = %names.lock,
                "relaylock: released an acquisition whose caller went away"),
            (Ok(_), None) => {}
            (Ok(_), Some(_)) => account(name.as_ref(), &outcome),
        }
    });
}
