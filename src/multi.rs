//! [`MultiGuard`]: the hold of a multi-key lock
//! ([`LockClient::lock_all`](crate::LockClient::lock_all)).
//!
//! # Implementation details
//!
//! Each key is an ordinary held lock with its own [`LockGuard`], all with
//! one token: the watchdog renews them as it renews every lock of the
//! client (the due ones in one call per slot, so a multi-key hold taken at
//! once is renewed at once), and a single-key `lock` of one of the keys
//! waits in the key's queue as behind any holder. What the multi-key guard
//! adds is the release: one call per slot group
//! ([`release_group`]), spawned as a task so that it completes whether or
//! not the caller waits for it.

use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use fred::interfaces::ClientLike;
use fred::util::redis_keyslot;
use metrics::SharedString;
use tokio_util::sync::CancellationToken;

use crate::calls::Released;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold_id::HoldId;
use crate::holds::Lease;
use crate::inner::ClientInner;
use crate::metrics as m;
use crate::release::{found_lost, release_group};
use crate::scripts::{Kind, Names};
use crate::state::order::groups;

/// The most keys one multi-key call takes
/// ([`LockClient::lock_all`](crate::LockClient::lock_all)); more is an
/// [`Error::InvalidArgument`].
pub const MAX_KEYS: usize = 10_000;

/// A held multi-key lock: every key of the set, each one an ordinary lock
/// with its own fencing token. Dropping it releases every key in the
/// background, one call per slot group; [`release`](Self::release) does
/// the same and reports whether any key was lost.
///
/// ```no_run
/// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
/// // Both accounts of a transfer, whatever order the caller names them in.
/// let guard = client.lock_all(["account:7", "account:3"]).await?;
/// let keys: Vec<&str> = guard.keys().collect();
/// assert_eq!(keys.len(), 2);
/// let fence = guard.fencing_token("account:7");
/// // ... move the money, each write fenced by its key's token ...
/// guard.release().await?;
/// # let _ = fence; Ok(()) }
/// ```
#[must_use = "dropping a guard releases its locks (in the background)"]
pub struct MultiGuard {
    inner: Arc<ClientInner>,
    /// The keys' guards, in the lock's global order (hash slot, then key).
    guards: Vec<LockGuard>,
    /// Each guard's key's hash slot (for the binary search of a key).
    slots: Vec<u16>,
    name: Option<SharedString>,
    acquired_at: Instant,
    /// Every key was taken (a hold being filled, dropped part way, is no
    /// acquisition: it records no hold time and no release).
    complete: bool,
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("keys", &self.guards.len())
            .field("token", &self.token())
            .finish_non_exhaustive()
    }
}

impl MultiGuard {
    /// An empty hold, which the acquisition fills key by key (dropped part
    /// way, it releases what it has).
    pub(crate) fn new(inner: Arc<ClientInner>, name: Option<SharedString>) -> Self {
        MultiGuard {
            inner,
            guards: Vec::new(),
            slots: Vec::new(),
            name,
            acquired_at: Instant::now(),
            complete: false,
        }
    }

    /// Add the next key's hold, in the global order.
    pub(crate) fn push(&mut self, guard: LockGuard, slot: u16) {
        self.guards.push(guard);
        self.slots.push(slot);
    }

    /// The acquisition is complete: the hold counts from now.
    pub(crate) fn acquired(&mut self) {
        self.acquired_at = Instant::now();
        self.complete = true;
    }

    /// The keys held, deduplicated, in the order they were taken: by hash
    /// slot, then by key.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::key)
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// Whether the hold has no key (never so for a hold
    /// [`lock_all`](crate::LockClient::lock_all) returned: an empty set is
    /// an error).
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// The fencing token of `key`'s lock (each key has its own, as a single
    /// lock's); `None` for a key this hold does not have.
    pub fn fencing_token(&self, key: &str) -> Option<u64> {
        self.guard(key).map(LockGuard::fencing_token)
    }

    /// Every key with its fencing token, in the order of [`keys`](Self::keys).
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&str, u64)> {
        self.guards.iter().map(|g| (g.key(), g.fencing_token()))
    }

    /// The token of this acquisition, the same for every key: `relaylock
    /// status` shows the keys it holds together.
    pub fn token(&self) -> &str {
        self.guards.first().map_or("", LockGuard::token)
    }

    /// The guard of one key: a binary search in the global order.
    fn guard(&self, key: &str) -> Option<&LockGuard> {
        let slot = redis_keyslot(Names::new(&self.inner.prefix, key).lock.as_bytes());
        let (mut lo, mut hi) = (0, self.guards.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if (self.slots[mid], self.guards[mid].key()) < (slot, key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        self.guards.get(lo).filter(|g| g.key() == key)
    }

    /// Whether every key is still held, by this process's knowledge (as
    /// [`LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// The first key (in [`keys`](Self::keys)' order) this process no
    /// longer counts as held; `None` while every key is.
    pub fn lost_key(&self) -> Option<String> {
        self.guards
            .iter()
            .find(|g| !g.is_held())
            .map(|g| g.key().to_owned())
    }

    /// Completes when any key is found lost or its lease runs out (as
    /// [`LockGuard::lost`]), or when the hold is released.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future changes nothing.
    pub async fn lost(&self) {
        let mut each: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = self
            .guards
            .iter()
            .map(|g| Box::pin(g.lost()) as Pin<Box<dyn Future<Output = ()> + Send>>)
            .collect();
        if each.is_empty() {
            return;
        }
        std::future::poll_fn(|cx| {
            for lost in &mut each {
                if lost.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        })
        .await;
    }

    /// A token cancelled when any key is known lost (as for
    /// [`lost`](Self::lost)), and also when this hold is released or
    /// dropped: hand it to tasks that must stop when the set is no longer
    /// held. Cancelling the returned token yourself affects nothing else.
    /// One small task per call watches the keys until the token is
    /// cancelled (called outside a tokio runtime, the token is cancelled at
    /// once: nothing could watch).
    pub fn lost_token(&self) -> CancellationToken {
        let any = CancellationToken::new();
        let keys: Vec<CancellationToken> = self.guards.iter().map(LockGuard::lost_token).collect();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            any.cancel();
            return any;
        };
        let fire = any.clone();
        handle.spawn(async move {
            let mut each: Vec<_> = keys.iter().map(|t| Box::pin(t.cancelled())).collect();
            let first = std::future::poll_fn(|cx| {
                if each.iter_mut().any(|w| w.as_mut().poll(cx).is_ready()) || each.is_empty() {
                    return Poll::Ready(());
                }
                Poll::Pending
            });
            tokio::select! {
                () = first => fire.cancel(),
                () = fire.cancelled() => {}
            }
        });
        any
    }

    /// Set every key's remaining lease to `lease` from now (as
    /// [`LockGuard::extend`], all keys at once).
    ///
    /// # Errors
    ///
    /// The first error of a key's extend: [`Error::LockLost`] when a key no
    /// longer holds this token (the other keys are still extended),
    /// [`Error::InvalidArgument`] for a lease out of range, [`Error::Redis`]
    /// for a connection error or a command timeout. Safe to retry.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::extend`], for each key.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let each = self.guards.iter().map(|g| g.extend(lease)).collect();
        join_all(each).await.into_iter().collect()
    }

    /// Release every key, one call per slot group, waking each key's next
    /// waiter.
    ///
    /// # Errors
    ///
    /// * [`Error::LockLost`] (naming the first such key) when any key's lease
    ///   had run out before the release: another owner may have run
    ///   concurrently. The other keys are released all the same;
    /// * [`Error::Redis`] for a connection error or a command timeout: the
    ///   keys of that group may stay held until their leases end;
    /// * [`Error::Shutdown`] when the client's shutdown took the hold (and
    ///   released it).
    ///
    /// # Cancel safety
    ///
    /// The release runs in a task of its own: dropping the future lets it
    /// complete in the background.
    pub async fn release(mut self) -> Result<()> {
        let taken = self.detach();
        let shut = taken.len() < self.guards.len();
        let report = self.report();
        let task = spawn_release(&self.inner, taken, report);
        let outcome = match task {
            Some(task) => task
                .await
                .unwrap_or_else(|e| Err(Error::UnexpectedReply(format!("release task: {e}")))),
            None => Ok(()),
        };
        match outcome {
            Ok(()) if shut => Err(Error::Shutdown),
            other => other,
        }
    }

    /// Take every key's hold out of its guard (see [`LockGuard::detach`]).
    fn detach(&mut self) -> Vec<(HoldId, Option<Arc<Lease>>)> {
        self.guards
            .iter_mut()
            .filter_map(LockGuard::detach)
            .map(|(hold, lease)| (hold, Some(lease)))
            .collect()
    }

    /// What the release reports to: the metrics name, and when the hold
    /// began once it was complete (a hold dropped part way records no hold
    /// time and no release).
    fn report(&mut self) -> Report {
        Report {
            name: self.name.take(),
            since: self.complete.then_some(self.acquired_at),
        }
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        // Held from before the holds leave the registry until the release
        // is spawned: a shutdown in between waits for it.
        let _busy = self.inner.background.token();
        let taken = self.detach();
        let report = self.report();
        let _ = spawn_release(&self.inner, taken, report);
    }
}

/// What a multi-key release reports to.
#[derive(Default)]
pub(crate) struct Report {
    /// The metrics name.
    pub(crate) name: Option<SharedString>,
    /// When the complete hold began (`None`: not a complete hold).
    pub(crate) since: Option<Instant>,
}

/// Release `taken` (one multi-key hold's keys, in order, each with its
/// lease state when a guard had it) in a task of the client's background:
/// one [`release_group`] per slot group, all at once, then each key's
/// outcome counted. `None` without a runtime (the keys stay held until
/// their leases end) or with nothing to release.
pub(crate) fn spawn_release(
    inner: &Arc<ClientInner>,
    taken: Vec<(HoldId, Option<Arc<Lease>>)>,
    report: Report,
) -> Option<tokio::task::JoinHandle<Result<()>>> {
    if taken.is_empty() {
        return None;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(
            keys = taken.len(),
            "relaylock: multi-key lock dropped outside a tokio runtime; its keys stay held until their leases end"
        );
        return None;
    };
    let background = inner.background.clone();
    let inner = Arc::clone(inner);
    let task = async move {
        let Report { name, since } = report;
        if let Some(since) = since {
            m::held(name.as_ref(), Kind::Multi, since.elapsed());
        }
        let clustered = inner.calls.redis().is_clustered();
        let (holds, leases): (Vec<HoldId>, Vec<Option<Arc<Lease>>>) = taken.into_iter().unzip();
        let ranges = slot_groups(&holds, clustered);
        let calls = ranges
            .iter()
            .map(|r| release_group(&inner, &holds[r.clone()]));
        let outcomes = join_all(calls.collect()).await;
        let mut first_error = None;
        for (range, outcome) in ranges.into_iter().zip(outcomes) {
            let group = &holds[range.clone()];
            let error = count_group(&inner, name.as_ref(), group, &leases[range], outcome);
            first_error = first_error.or(error);
        }
        match first_error {
            None => {
                if since.is_some() {
                    m::released(name.as_ref(), Kind::Multi);
                }
                Ok(())
            }
            Some(e) => {
                tracing::warn!(error = %e, "relaylock: a multi-key release did not release every key");
                Err(e)
            }
        }
    };
    // On the client's background: a shutdown waits for it.
    Some(background.spawn_on(task, &handle))
}

/// Count one group's outcome: each key found lost (as a lock's release
/// counts one); the error for the caller: the group's, or
/// [`Error::LockLost`] naming its first lost key.
fn count_group(
    inner: &ClientInner,
    name: Option<&SharedString>,
    group: &[HoldId],
    leases: &[Option<Arc<Lease>>],
    outcome: Result<Vec<Released>>,
) -> Option<Error> {
    let each = match outcome {
        Ok(each) => each,
        Err(e) => return Some(e),
    };
    let mut lost = None;
    for ((hold, lease), released) in group.iter().zip(leases).zip(each) {
        if let (Released::NotOurs, Some(lease)) = (released, lease) {
            found_lost(inner, name, hold, lease);
            lost.get_or_insert_with(|| Error::LockLost {
                key: key_of(&inner.prefix, hold).to_owned(),
            });
        }
    }
    lost
}

/// The key of a lock's hold, from its value's name `<prefix>:4:{<key>}`.
fn key_of<'h>(prefix: &str, hold: &'h HoldId) -> &'h str {
    let lock = &*hold.names.lock;
    lock.get(prefix.len() + 4..lock.len().saturating_sub(1))
        .unwrap_or(lock)
}

/// The slot groups of `holds` (in the global order): runs of one hash slot
/// in a cluster, else one group.
pub(crate) fn slot_groups(holds: &[HoldId], clustered: bool) -> Vec<Range<usize>> {
    let slots: Vec<u16> = holds
        .iter()
        .map(|h| redis_keyslot(h.names.lock.as_bytes()))
        .collect();
    groups(&slots, clustered)
}

/// Run `futures` at once, [`JOINED`] at a time (each wake-up polls every
/// pending one of them); their outputs in order.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut out = Vec::with_capacity(futures.len());
    let mut rest = futures.into_iter();
    loop {
        let chunk: Vec<F> = rest.by_ref().take(JOINED).collect();
        if chunk.is_empty() {
            return out;
        }
        out.extend(join_chunk(chunk).await);
    }
}

/// How many futures [`join_all`] polls together.
const JOINED: usize = 256;

/// Run `futures` at once; their outputs in order.
async fn join_chunk<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut each: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = each.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in each.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *o = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
