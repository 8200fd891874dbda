//! The release protocol: one hold's release script and what it tells this
//! client's waiters; the accounting of its outcome; and the background
//! releases of dropped guards, abandoned acquisitions and locks granted to
//! a local waiter that left.
//!
//! A release takes one registry handle ([`Releasing`]) before its script is
//! sent and finishes it with the outcome: whether this client queues again
//! for its local waiters, which local waiter the lock is given to directly,
//! and which wake (see `crate::registry::Releasing`).
//!
//! # Invariants
//!
//! * A release is safe to repeat: the scripts recognise a replay of a
//!   release that already ran (the ring of released fences), so a release
//!   whose future is dropped is sent again in the background.
//! * No panic leaves a lock held: a dropped guard spawns its release before
//!   anything that may panic (the metrics recorder is user code).
//! * A local waiter claimed for a direct hand-over is always resolved: by
//!   the outcome, or as unknown when the release is dropped; a lock granted
//!   to a waiter that left is released in the background.

use std::sync::Arc;
use std::time::Instant;

use fred::bytes_utils::Str;
use metrics::SharedString;

use crate::calls::{ReleaseCall, Released};
use crate::error::Result;
use crate::hold_id::HoldId;
use crate::holds::Lease;
use crate::inner::ClientInner;
use crate::metrics as m;
use crate::registry::Releasing;
use crate::scripts::Names;
use crate::state::handoff::Orphan;

/// Release `hold`: the release script, queueing this client again when it
/// still has local waiters. `hold.fence` is `None` for an acquisition whose
/// reply never arrived.
///
/// With the fence known and a local waiter offering to take the lock, the
/// release names that waiter's token, and the script gives it the lock at
/// once when no other client is queued: the hand-over costs this one
/// request. A semaphore hold (`names.kind`) goes to [`release_permits`].
///
/// # Cancel safety
///
/// Dropped before its reply, a claimed waiter re-checks (the acquire script
/// finds a lock granted to its token); if that waiter left too, its token is
/// released in the background as an abandoned acquisition. The release
/// itself may or may not have run: callers that drop it send it again.
pub(crate) async fn release(inner: &Arc<ClientInner>, hold: &HoldId) -> Result<Released> {
    if hold.names.kind.counted() {
        return release_permits(inner, hold).await;
    }
    let registry = &inner.registry;
    let closing = inner.closing.is_cancelled();
    let begun = registry.begin_release(&hold.names.channel, closing, hold.fence.is_some());
    let mut pending = InFlight {
        releasing: begun,
        inner,
        names: &hold.names,
    };
    let sent = Instant::now();
    let call = ReleaseCall {
        requeue: pending.releasing.requeued(),
        next: pending.releasing.next(),
        record: true,
    };
    let outcome = inner.calls.release(hold, registry.client_id(), call).await;
    let (released, standby) = match &outcome {
        Ok((released, standby)) => (Some(*released), *standby),
        Err(_) => (None, false),
    };
    if let Some(left) = pending.releasing.finish_lock(released, standby, sent) {
        release_orphan(inner, &hold.names, left.token, left.orphan);
    }
    outcome.map(|(released, _)| released)
}

/// Release a semaphore hold of `hold.permits` permits (`fence` `None`: an
/// acquisition abandoned in flight, whose token is voided too). The script
/// queues this client again when it still has local waiters (with the
/// largest need among them), and reserves freed permits for the queued
/// clients in order, telling each other client with one message. This
/// client's own waiters are woken by the registry's handle: so a release
/// that frees k permits wakes at most k waiters in this client, and one per
/// other client it reserved for.
async fn release_permits(inner: &Arc<ClientInner>, hold: &HoldId) -> Result<Released> {
    let registry = &inner.registry;
    let closing = inner.closing.is_cancelled();
    let mut releasing = registry.begin_release(&hold.names.channel, closing, false);
    // `None` without a requeue, as before any local waiter said its need.
    let need = releasing.need();
    let role = registry.role_id(hold.names.kind);
    let outcome = inner.calls.sem_release(hold, role, need, true).await;
    let wake = outcome.as_ref().ok().map(|(_, wake, mine)| (*wake, *mine));
    releasing.finish_permits(wake, hold.permits, hold.names.kind);
    drop(releasing);
    outcome.map(|(released, _, _)| released)
}

/// A release's registry handle, resolved as an unknown outcome if the
/// release is dropped before its reply.
struct InFlight<'a> {
    releasing: Releasing,
    inner: &'a Arc<ClientInner>,
    names: &'a Names,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(left) = self.releasing.abandon() {
            release_orphan(self.inner, self.names, left.token, left.orphan);
        }
    }
}

/// A lock granted to a local waiter that left: release it (in the
/// background), or its token as an abandoned acquisition.
pub(crate) fn release_orphan(inner: &Arc<ClientInner>, names: &Names, token: Str, orphan: Orphan) {
    let fence = match orphan {
        Orphan::None | Orphan::Left => return,
        Orphan::Held(fence) => Some(fence),
        Orphan::Unknown => None,
    };
    let hold = HoldId {
        names: names.clone(),
        token,
        fence,
        permits: 1,
    };
    release_in_background(Arc::clone(inner), hold, None);
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
    hold: &HoldId,
    outcome: &Result<Released>,
    lease: Option<&Lease>,
) {
    let kind = hold.names.kind;
    match outcome {
        Ok(Released::Freed | Released::HandedOver | Released::Granted(_) | Released::Already) => {
            m::released(name, kind)
        }
        Ok(Released::NotOurs) => match lease {
            Some(lease) => found_lost(inner, name, hold, lease),
            None => m::lost(name, kind),
        },
        Err(_) => {}
    }
}

/// A release found `hold` lost: count it (once, if nobody counted it
/// before: the watchdog, `extend`), and if its lease should still run (by
/// this process's clock), tell every waiting client to re-check.
pub(crate) fn found_lost(
    inner: &ClientInner,
    name: Option<&SharedString>,
    hold: &HoldId,
    lease: &Lease,
) {
    let early = Instant::now() < lease.record().safe_until();
    // Only the first to find the loss tells (the watchdog may have, before
    // this release).
    if lease.mark_lost(|| m::lost(name, hold.names.kind)) && early {
        inner
            .calls
            .value_vanished(&hold.names, hold.fence, &hold.token);
    }
}

/// Release the holds `group` of one multi-key lock, all in one slot in a
/// cluster, with one [`RELEASE_ALL`](crate::scripts::RELEASE_ALL) call:
/// each key as [`release`] releases one (a fence `None`: an acquisition
/// abandoned in flight, whose token is voided), except that no local
/// waiter is handed a key directly (each key's local waiters are
/// woken when it is freed, and this client queues again for a key that
/// still has some). Each key's outcome, in order.
///
/// # Cancel safety
///
/// The script may or may not have run when the future is dropped; a
/// repeated call is recognised key by key (the ring of released fences).
pub(crate) async fn release_group(
    inner: &Arc<ClientInner>,
    group: &[HoldId],
) -> Result<Vec<Released>> {
    let Some(first) = group.first() else {
        return Ok(Vec::new());
    };
    let registry = &inner.registry;
    let closing = inner.closing.is_cancelled();
    let mut pending: Vec<InFlight<'_>> = group
        .iter()
        .map(|hold| InFlight {
            releasing: registry.begin_release(&hold.names.channel, closing, false),
            inner,
            names: &hold.names,
        })
        .collect();
    let requeue: Vec<bool> = pending.iter().map(|p| p.releasing.requeued()).collect();
    let names: Vec<&Names> = group.iter().map(|hold| &hold.names).collect();
    let fences: Vec<Option<u64>> = group.iter().map(|hold| hold.fence).collect();
    let sent = Instant::now();
    let client = registry.client_id();
    let outcome = inner
        .calls
        .release_all(&names, &first.token, &fences, &requeue, client)
        .await;
    for (i, p) in pending.iter_mut().enumerate() {
        let (released, standby) = match &outcome {
            Ok(each) => (Some(each[i].0), each[i].1),
            Err(_) => (None, false),
        };
        // No waiter was claimed: nothing is returned to release.
        let _ = p.releasing.finish_lock(released, standby, sent);
    }
    outcome.map(|each| each.into_iter().map(|(released, _)| released).collect())
}

/// What a dropped guard's background release reports to: its `name` label
/// and its lease state.
pub(crate) type Report = (Option<SharedString>, Arc<Lease>);

/// Release `hold` without waiting for the outcome: for a dropped guard
/// (`report` given) and for an acquisition its caller abandoned (in flight:
/// `fence` None; or during `WAIT`), which records no metrics because it was
/// never reported as acquired.
pub(crate) fn release_in_background(inner: Arc<ClientInner>, hold: HoldId, report: Option<Report>) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            key = %hold.names.lock,
            "relaylock: lock dropped outside a tokio runtime; it stays held until its lease ends"
        );
        return;
    };
    let background = inner.background.clone();
    // Moved into the future, so dropped with it even if it never ran: when
    // the runtime ends first (a `main` that returned without `shutdown()`),
    // it says so; the lock stays.
    let unfinished = Unfinished(hold.names.lock.clone(), false);
    let task = async move {
        let outcome = release(&inner, &hold).await;
        unfinished.finished();
        let key = &hold.names.lock;
        match (&outcome, report) {
            (Err(e), _) => tracing::warn!(%key, error = %e,
                "relaylock: background release failed; the lock stays held until its lease ends"),
            (Ok(Released::Freed | Released::HandedOver | Released::Granted(_)), None) => {
                tracing::debug!(%key, "relaylock: released an acquisition whose caller went away")
            }
            (Ok(_), None) => {}
            (Ok(_), Some((name, lease))) => {
                account(&inner, name.as_ref(), &hold, &outcome, Some(&lease))
            }
        }
    };
    background.spawn_on(task, &handle);
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
