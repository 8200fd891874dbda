//! The watchdog: ONE task per client that renews every watched lock and fires
//! the lost-lock signal of every guard somebody listens to.
//!
//! # Guarantees
//!
//! * **Batched.** A lock is due for renewal a third of its lease after its
//!   lease was last set. A round starts when at least one lock is due and
//!   carries every lock that is due within the next half period too, in one
//!   [`RENEW`](crate::scripts::RENEW) call (up to
//!   [`RENEW_BATCH`](crate::scripts::RENEW_BATCH) locks per call). Locks
//!   taken at different moments so fall into step, and a client holding N
//!   watched locks sends about one call per period, not N.
//! * **Only while the guard lives.** A guard leaves the watchdog before its
//!   release is sent, and the outcome of a round for a guard that left meanwhile
//!   is ignored (no signal, no metric). A renewal only ever runs `PEXPIRE` on
//!   a key holding its token: it can neither re-create a released key nor
//!   extend another owner's lock.
//! * **Lost is known.** The signal fires when a renewal finds the key gone or
//!   holding another token, or when the local monotonic clock passes the end
//!   of the last confirmed lease minus a safety margin ([`margin`]), whichever
//!   comes first, also while a renewal round is stuck on an unreachable
//!   server. A lease counts from when the command that set it was SENT, which
//!   is no later than when Redis started it.
//! * **What it cannot do.** A process that is itself paused (GC, SIGSTOP, a VM
//!   migration) past its lease learns of the loss only when it runs again,
//!   possibly after touching the resource. Fencing tokens close that hole: see
//!   `docs/design.md`.
//!
//! Cancellation: the task lives as long as the client; a round in flight when
//! the client is dropped is abandoned, which is safe because renewing is
//! idempotent and the leases then simply run out.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use fred::interfaces::ClientLike;
use fred::util::redis_keyslot;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::calls::{Calls, RenewItem};
use crate::holds::{Hold, Holds, Watched};
use crate::metrics::{self as m, Renewal};
use crate::scripts::{Kind, RENEW_BATCH};

/// After a round fails (Redis unreachable, timeout), its locks are retried
/// this long later (and again until their lease runs out).
const RETRY: Duration = Duration::from_millis(100);

/// One lock of a round.
struct Item {
    id: u64,
    lock: Str,
    kind: Kind,
    token: Str,
    lease: Duration,
    generation: u64,
}

/// The outcome of one lock in a round.
struct RoundResult {
    id: u64,
    lease: Duration,
    generation: u64,
    /// When its call was sent.
    sent: Instant,
    /// The script's code for it; `None`: the call failed (it was logged).
    code: Option<i64>,
}
type Round = Pin<Box<dyn Future<Output = Vec<RoundResult>> + Send>>;

/// The state the guards and the task share.
pub(crate) struct Watchdog {
    /// The script calls (a batched `RENEW`).
    calls: Calls,
    /// The client's holds, each with the watchdog's state of it (`watch`).
    pub(crate) holds: Holds,
    wake: Notify,
    /// When the task will next wake by itself, in µs since `epoch`. Written
    /// and read only under the `holds` lock, so a registration either is
    /// seen by the planning pass or sees its result.
    planned: AtomicU64,
    epoch: Instant,
    /// The longest the task sleeps: a third of the client's default lease
    /// (at least 1 s, at most an hour). With a default lease of 3 s or
    /// more, a lock with that lease watched after the task planned has its
    /// first renewal no earlier than this after the plan, so it does not
    /// wake the task: a client that holds one lock at a time (the map empty
    /// whenever the task plans) would otherwise wake it for every lock.
    idle: Duration,
    /// Planning passes so far (tests count the task's wake-ups).
    #[cfg(test)]
    plans: AtomicU64,
}

impl Watchdog {
    /// How often the task has planned a round so far (for a test of how
    /// often it wakes).
    #[cfg(test)]
    pub(crate) fn plans(&self) -> u64 {
        self.plans.load(Ordering::Relaxed)
    }

    /// The watchdog of a client whose default lease is `default_lease`.
    pub(crate) fn new(calls: Calls, default_lease: Duration) -> Arc<Self> {
        Arc::new(Watchdog {
            idle: (default_lease / 3).clamp(Duration::from_secs(1), Duration::from_secs(3600)),
            #[cfg(test)]
            plans: AtomicU64::new(0),
            calls,
            holds: Holds::default(),
            wake: Notify::new(),
            planned: AtomicU64::new(u64::MAX),
            epoch: Instant::now(),
        })
    }

    fn micros(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// Register a hold a guard now owns (see `crate::holds`), looked after
    /// at once when `renew`: renewed, and its signal fired when it is found
    /// lost or its lease runs out. Returns its id; `None` once the client is
    /// shut down (the caller releases the hold itself).
    pub(crate) fn register(&self, mut hold: Hold, renew: bool) -> Option<u64> {
        hold.watch = renew.then(|| Watched::new(true));
        let first_event = renew.then(|| self.first_event(&hold));
        let mut holds = self.holds.state();
        let id = holds.insert(hold)?;
        if let Some(at) = first_event {
            self.wake_for(at);
        }
        drop(holds);
        Some(id)
    }

    /// Fire the signal of hold `id` (a fixed lease somebody listens to) when
    /// its lease runs out or it is found lost. Nothing if the hold is gone
    /// (released, taken by the shutdown) or already looked after.
    pub(crate) fn listen(&self, id: u64) {
        let mut holds = self.holds.state();
        let Some(hold) = holds.live.get_mut(&id) else {
            return;
        };
        if hold.watch.is_some() {
            return;
        }
        hold.watch = Some(Watched::new(false));
        let at = self.first_event(hold);
        self.wake_for(at);
        drop(holds);
    }

    /// When the watchdog first has something to do for `hold`: renew it a
    /// third into its lease, or fire its signal when the lease runs out.
    fn first_event(&self, hold: &Hold) -> Instant {
        if hold.watch.is_some_and(|w| w.renew) {
            let s = hold.lease.state();
            s.sent + s.lease / 3
        } else {
            hold.lease.safe_until()
        }
    }

    /// Wake the task only when it would otherwise sleep past `at`; a burst
    /// of acquisitions wakes it once. Called under the `holds` lock.
    fn wake_for(&self, at: Instant) {
        if self.micros(at) < self.planned.load(Ordering::SeqCst) {
            self.wake.notify_one();
        }
    }

    /// An operator released the hold of `token` (its control channel said
    /// so): check it now, without changing its lease (a grow-only renewal
    /// to 1 ms never shortens one), and fire its signal if it is gone or
    /// held by another token. Anyone who may publish on the channel can ask
    /// for this check; only Redis's answer marks a hold lost.
    pub(crate) fn verify(self: &Arc<Self>, token: &str) {
        let found: Vec<(u64, Str, Kind, Str)> = {
            let holds = self.holds.state();
            holds
                .live
                .iter()
                .filter(|(_, h)| &*h.id.token == token)
                .map(|(id, h)| {
                    (
                        *id,
                        h.id.names.lock.clone(),
                        h.id.names.kind,
                        h.id.token.clone(),
                    )
                })
                .collect()
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for (id, lock, kind, token) in found {
            let dog = Arc::clone(self);
            handle.spawn(async move {
                let check = [RenewItem {
                    lock: &lock,
                    kind,
                    token: &token,
                    lease_ms: 1,
                }];
                if let Ok(codes) = dog.calls.renew(&check).await {
                    if let [0 | -1] = codes[..] {
                        let mut holds = dog.holds.state();
                        if let Some(h) = holds.live.get_mut(&id) {
                            // Counted as lost (once, by `give_up`), not as
                            // a renewal: this check renewed nothing.
                            give_up(h, "an operator released it");
                        }
                    }
                }
            });
        }
    }

    /// A lease changed outside the task (`extend`): plan again.
    pub(crate) fn replan(&self) {
        self.wake.notify_one();
    }

    /// Fire the signals of leases that ran out, start a round if a lock is
    /// due and none is in flight, and return when to look again.
    fn plan(self: &Arc<Self>, round: &mut Option<Round>) -> Instant {
        #[cfg(test)]
        self.plans.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut next = now + self.idle;
        let mut due = Vec::new();
        let mut early = Vec::new();
        let mut expired = Vec::new();
        let mut holds = self.holds.state();
        for (&id, h) in holds.live.iter() {
            let Some(w) = h.watch else {
                continue;
            };
            if h.lease.is_lost() {
                expired.push(id);
                continue;
            }
            let s = h.lease.state();
            let safe_until = s.safe_until();
            if now >= safe_until {
                expired.push(id);
                continue;
            }
            next = next.min(safe_until);
            if !w.renew || w.in_flight || round.is_some() {
                // A round in flight wakes the task when it ends.
                continue;
            }
            let period = s.lease / 3;
            let at = (s.sent + period).max(w.retry_at.unwrap_or(now));
            if at <= now {
                due.push(id);
            } else {
                if at <= now + period / 2 {
                    early.push(id);
                }
                next = next.min(at);
            }
        }
        for id in expired {
            // The guard still owns the hold (the shutdown releases it); the
            // watchdog is done with it.
            let Some(h) = holds.live.get_mut(&id) else {
                continue;
            };
            // Not found by a script: the lease ran out unconfirmed.
            give_up(h, "its lease ran out before a renewal got through");
        }
        if !due.is_empty() {
            due.extend(early);
            let items: Vec<Item> = due
                .into_iter()
                .filter_map(|id| {
                    let h = holds.live.get_mut(&id)?;
                    h.watch.as_mut()?.in_flight = true;
                    let s = h.lease.state();
                    Some(Item {
                        id,
                        lock: h.id.names.lock.clone(),
                        kind: h.id.names.kind,
                        token: h.id.token.clone(),
                        lease: s.renew_with,
                        generation: s.generation,
                    })
                })
                .collect();
            *round = Some(Box::pin(Arc::clone(self).renew(items)));
        }
        self.planned.store(self.micros(next), Ordering::SeqCst);
        drop(holds);
        next
    }

    /// One round: every item, in calls of at most `RENEW_BATCH` holds, one
    /// kind per call (locks by `RENEW`, semaphore holds by `SEM_RENEW`).
    async fn renew(self: Arc<Self>, mut items: Vec<Item>) -> Vec<RoundResult> {
        let kind = |it: &Item| it.kind.counted();
        if !self.calls.redis().is_clustered() {
            items.sort_by_key(kind);
            let mut out = Vec::with_capacity(items.len());
            let split = items.partition_point(|it| !kind(it));
            for part in [&items[..split], &items[split..]] {
                for chunk in part.chunks(RENEW_BATCH) {
                    out.extend(self.renew_chunk(chunk).await);
                }
            }
            return out;
        }
        // In Redis Cluster the keys of one script call must share a slot:
        // one call per slot (and kind), all sent at once (each to its node)
        // rather than one round trip after another.
        let slot = |it: &Item| (redis_keyslot(it.lock.as_bytes()), kind(it));
        items.sort_by_key(slot);
        let total = items.len();
        let mut chunks: Vec<Vec<Item>> = Vec::new();
        for it in items {
            match chunks.last_mut() {
                Some(c) if c.len() < RENEW_BATCH && slot(&c[0]) == slot(&it) => c.push(it),
                _ => chunks.push(vec![it]),
            }
        }
        let mut calls = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            let ids: Vec<(u64, Duration, u64)> = chunk
                .iter()
                .map(|it| (it.id, it.lease, it.generation))
                .collect();
            let dog = Arc::clone(&self);
            calls.push((
                ids,
                tokio::spawn(async move { dog.renew_chunk(&chunk).await }),
            ));
        }
        let mut out = Vec::with_capacity(total);
        for (ids, call) in calls {
            match call.await {
                Ok(outcomes) => out.extend(outcomes),
                // The call's task panicked or was cancelled: an unknown
                // outcome, retried like a failed call.
                Err(_) => out.extend(ids.into_iter().map(|(id, lease, generation)| RoundResult {
                    id,
                    lease,
                    generation,
                    sent: Instant::now(),
                    code: None,
                })),
            }
        }
        out
    }

    /// One RENEW call for `chunk` (all in one slot, in a cluster).
    async fn renew_chunk(&self, chunk: &[Item]) -> Vec<RoundResult> {
        let batch: Vec<RenewItem<'_>> = chunk
            .iter()
            .map(|it| RenewItem {
                lock: &it.lock,
                kind: it.kind,
                token: &it.token,
                lease_ms: it.lease.as_millis() as u64,
            })
            .collect();
        let sent = Instant::now();
        let reply = self.calls.renew(&batch).await;
        let codes = match reply {
            Ok(codes) if codes.len() == chunk.len() => codes.into_iter().map(Some).collect(),
            Ok(codes) => {
                tracing::warn!(
                    "relaylock: renew replied {} codes for {} locks",
                    codes.len(),
                    chunk.len()
                );
                vec![None; chunk.len()]
            }
            Err(e) => {
                tracing::warn!(error = %e, locks = chunk.len(),
                    "relaylock: renewal failed; retrying until the leases run out");
                vec![None; chunk.len()]
            }
        };
        chunk
            .iter()
            .zip(codes)
            .map(|(it, code)| RoundResult {
                id: it.id,
                lease: it.lease,
                generation: it.generation,
                sent,
                code,
            })
            .collect()
    }

    /// Apply the outcome of a round.
    fn finish(&self, outcomes: Vec<RoundResult>) {
        let now = Instant::now();
        let mut holds = self.holds.state();
        for RoundResult {
            id,
            lease,
            generation,
            sent,
            code,
        } in outcomes
        {
            // Released or dropped meanwhile: not ours to judge.
            let Some(h) = holds.live.get_mut(&id) else {
                continue;
            };
            let Some(w) = h.watch.as_mut() else {
                continue;
            };
            w.in_flight = false;
            match code {
                Some(1) => {
                    h.lease.record().renewed(generation, sent, lease);
                    w.retry_at = None;
                    m::renewal(h.name.as_ref(), h.id.names.kind, Renewal::Renewed);
                }
                Some(code @ (0 | -1)) => {
                    m::renewal(h.name.as_ref(), h.id.names.kind, Renewal::Lost);
                    let found = if code == 0 {
                        "the key is gone"
                    } else {
                        "the key holds another token"
                    };
                    // Before its lease's end the value can only have been
                    // evicted, flushed, deleted or unlocked by an operator,
                    // and its queue may be gone with it.
                    let early = now < h.lease.record().safe_until();
                    if give_up(h, found) && early {
                        self.calls
                            .value_vanished(&h.id.names, h.id.fence, &h.id.token);
                    }
                }
                other => {
                    if let Some(code) = other {
                        tracing::warn!(key = %h.id.names.lock, "relaylock: renew replied {code}");
                    }
                    w.retry_at = Some(now + RETRY);
                    m::renewal(h.name.as_ref(), h.id.names.kind, Renewal::Error);
                }
            }
        }
    }
}

/// Start the client's watchdog task, run again should it panic (see
/// `crate::supervise`; a round in flight then is planned again).
/// The watchdog found hold `h` lost (`why`): it stops looking after it (the
/// guard still owns the hold), and the loss is counted and logged once,
/// whoever finds it first.
/// Returns whether it was the first to find the loss.
fn give_up(h: &mut Hold, why: &str) -> bool {
    h.watch = None;
    h.lease.mark_lost(|| {
        m::lost(h.name.as_ref(), h.id.names.kind);
        tracing::warn!(key = %h.id.names.lock, "relaylock: lock lost: {why}");
    })
}

pub(crate) fn spawn(dog: &Arc<Watchdog>) -> JoinHandle<()> {
    let dog = Arc::clone(dog);
    crate::supervise::supervise("watchdog", move |panics| {
        if panics > 0 {
            // The round in flight died with the run: its locks are due again.
            for w in dog
                .holds
                .state()
                .live
                .values_mut()
                .filter_map(|h| h.watch.as_mut())
            {
                w.in_flight = false;
            }
        }
        run(Arc::clone(&dog))
    })
}

async fn run(dog: Arc<Watchdog>) {
    {
        let mut round: Option<Round> = None;
        loop {
            let next = dog.plan(&mut round);
            tokio::select! {
                outcomes = async { round.as_mut().expect("checked").await }, if round.is_some() => {
                    round = None;
                    dog.finish(outcomes);
                }
                _ = tokio::time::sleep_until(next.into()) => {}
                _ = dog.wake.notified() => {}
            }
        }
    }
}
