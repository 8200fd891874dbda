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
use crate::error::{Error, Result};
use crate::inner::ClientInner;
use crate::release::{account, release};

/// Shut the client down once: the first call runs [`shut_down`], later
/// and concurrent ones wait for it and return `Ok(())`.
pub(crate) async fn shutdown(inner: &Arc<ClientInner>) -> Result<()> {
    let mut outcome = Ok(());
    inner
        .shut_down
        .get_or_init(|| async {
            outcome = shut_down(inner).await;
        })
        .await;
    outcome
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
                // A leadership resigned: its election's observers hear it.
                if crate::calls::is_election(&hold.id.names.lock) {
                    let _ = inner.calls.announce(&hold.id.names).await;
                }
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
