//! [`LockClient::shutdown`]: release everything the client holds, leave
//! every queue, stop its tasks; then refuse every call.
//!
//! The order:
//! 1. `closing` is cancelled: every lock call in progress on any clone ends
//!    with [`Error::Shutdown`] at its next poll (dropping a wait is
//!    cancel-safe: an acquire in flight is released in the background, a
//!    waiter's registration is removed, and the last one of a key takes the
//!    client out of its queue), and every new call is refused;
//! 2. the watchdog stops, so no renewal races the releases;
//! 3. the holds still registered (live guards, see `crate::holds`) are taken
//!    and released, each on the client's task tracker;
//! 4. the shutdown waits for the tracker: those releases, the background
//!    releases of dropped guards and abandoned acquisitions, the queue
//!    leaves, and the lock calls and releases still winding down;
//! 5. the subscriber task stops and the connections relaylock opened close.

use std::sync::Arc;
use std::time::Duration;

use crate::calls::Released;
use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::inner::ClientInner;
use crate::release::{account, release};

impl LockClient {
    /// Release everything this client holds and stop it: for a graceful
    /// exit, so that no lock of this process stays held for its lease after
    /// the process is gone.
    ///
    /// It stops the watchdog; releases every lock, permit, read and write
    /// that a guard of this client still holds (live guards as well as
    /// dropped ones whose background release is in flight); ends every lock
    /// call waiting on any clone with [`Error::Shutdown`] and takes this
    /// client out of every queue; waits for all of that, each release
    /// bounded by the command timeout; then stops the subscriber and closes
    /// the connections relaylock opened (a client passed in with
    /// [`fred_client`](crate::LockClientBuilder::fred_client) stays open).
    ///
    /// From the moment it begins, every call on any clone fails with
    /// [`Error::Shutdown`]: `lock`, `try_lock`, `is_locked`, `inspect`, the
    /// semaphore and read-write calls, and a guard's `extend`. A guard whose
    /// hold the shutdown released fires its [`lost`](crate::LockGuard::lost)
    /// signal (without counting a loss), and its `release` returns
    /// `Err(Error::Shutdown)`.
    ///
    /// Idempotent: a second call (on any clone) after the first completed
    /// returns `Ok(())` at once; calls made while one runs wait for it and
    /// then return `Ok(())` (the errors are the running call's to report).
    /// A `with_lock` (or `with_permit`, `with_read`, `with_write`) whose
    /// hold the shutdown released fails with `Error::Shutdown`.
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// // ... serve until the process is asked to stop ...
    /// client.shutdown().await?; // every key this process held is free now
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// The first error of a release it made ([`Error::Redis`] for a
    /// connection error or a command timeout; that hold then expires with its
    /// lease), or [`Error::Redis`] with a timeout when the background work
    /// did not end within four command timeouts (a lock call whose future is
    /// kept but never polled holds it up). The client is shut down either
    /// way.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the client refusing every call (the
    /// shutdown began), and the releases it started run to their end in the
    /// background; the subscriber and the connections are then stopped only
    /// when the last clone is dropped, or by calling `shutdown` again.
    pub async fn shutdown(&self) -> Result<()> {
        let inner = &self.inner;
        let mut outcome = Ok(());
        inner
            .shut_down
            .get_or_init(|| async {
                outcome = shut_down(inner).await;
            })
            .await;
        outcome
    }
}

async fn shut_down(inner: &Arc<ClientInner>) -> Result<()> {
    inner.closing.cancel();
    inner.tasks.watchdog_task.abort();
    let releases: Vec<_> = inner
        .watchdog
        .holds
        .close()
        .into_iter()
        .map(|hold| {
            hold.lease.close();
            let inner = Arc::clone(inner);
            inner.background.clone().spawn(async move {
                let outcome = release(&inner, &hold.id).await;
                account(&inner, hold.name.as_ref(), &hold.id, &outcome, None);
                outcome
            })
        })
        .collect();
    let mut first_error = None;
    for handle in releases {
        let error = match handle.await {
            Ok(Ok(Released::NotOurs)) => {
                tracing::warn!("relaylock: shutdown: a hold had already expired");
                None
            }
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e),
            // A panic in a release task (the metrics recorder): the rest
            // still runs.
            Err(e) => {
                tracing::error!(error = %e, "relaylock: shutdown: a release task failed");
                None
            }
        };
        first_error = first_error.or(error);
    }
    inner.background.close();
    let limit = inner.command_timeout.saturating_mul(4);
    if tokio::time::timeout(limit, inner.background.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            tasks = inner.background.len(),
            "relaylock: shutdown: background work still running after {limit:?}"
        );
        first_error.get_or_insert_with(|| {
            Error::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Timeout,
                format!("relaylock: shutdown: background work still running after {limit:?}"),
            ))
        });
    }
    forget_identity(inner, first_error.is_none()).await;
    // The subscriber and the connections; bounded by the command timeout
    // each.
    let stopping = inner.stop();
    let _ =
        tokio::time::timeout(inner.command_timeout * 3 + Duration::from_secs(1), stopping).await;
    first_error.map_or(Ok(()), Err)
}

/// Nothing of this client is held or queued any more (`released_all`): its
/// record (its name, for operators) goes too, within the command timeout;
/// its refresh is stopped first, so a rewrite in flight cannot bring it
/// back. Kept when a release failed: that hold may still be in Redis, and
/// is named by it.
async fn forget_identity(inner: &ClientInner, released_all: bool) {
    inner.tasks.identity_task.abort();
    if released_all {
        crate::identity::forget(
            inner.calls.redis(),
            &inner.prefix,
            &inner.identity,
            inner.command_timeout,
        )
        .await;
    }
}
