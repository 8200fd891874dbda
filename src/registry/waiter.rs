//! [`Waiter`]: one task registered for a key, from its first try until it
//! is dropped; and the polling role of a key whose subscription cannot be
//! confirmed.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use metrics::SharedString;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use super::{KeyWaiters, Registry};
use crate::metrics as m;
use crate::scripts::Names;
use crate::state::handoff::{Inbox, Offer};

/// One registered waiter. Dropping it deregisters it; the last one to leave
/// a key schedules the unsubscription.
#[derive(Debug)]
pub(crate) struct Waiter {
    registry: Arc<Registry>,
    channel: Str,
    entry: Arc<KeyWaiters>,
    /// Set once the task really waits: it then counts in the waiters gauge
    /// until dropped.
    gauge: Gauge,
    /// A try that may queue this client is in flight: if the waiter is
    /// dropped before its outcome is known, the client may be queued.
    queued_try: AtomicBool,
    /// A semaphore waiter's need, registered in the key's `needs`.
    need: Option<(u32, u32)>,
}

impl Waiter {
    /// A waiter of `channel`'s `entry`, which `join` just counted.
    pub(super) fn new(registry: Arc<Registry>, channel: Str, entry: Arc<KeyWaiters>) -> Waiter {
        Waiter {
            registry,
            channel,
            entry,
            gauge: Gauge::NotCounted,
            queued_try: AtomicBool::new(false),
            need: None,
        }
    }
}

/// Whether a waiter counts in the `relaylock_waiters` gauge.
#[derive(Debug)]
enum Gauge {
    NotCounted,
    /// Counted, under this `name` label (if any).
    Counted(Option<SharedString>),
}

/// The polling role of a degraded key, held by one waiter; dropping it
/// hands the role to the next waiter.
#[derive(Debug)]
pub(crate) struct PollerRole {
    entry: Arc<KeyWaiters>,
}

impl Drop for PollerRole {
    fn drop(&mut self) {
        self.entry.poller.store(false, SeqCst);
        // A permit is stored if nobody waits yet: the next degraded waiter
        // to sleep takes the role instead.
        self.entry.poller_freed.notify_one();
    }
}

impl Waiter {
    /// Count this task in the `relaylock_waiters` gauge until it is dropped.
    pub(crate) fn count_as_waiting(&mut self, name: Option<&SharedString>) {
        if let Gauge::NotCounted = self.gauge {
            m::waiters(name, Names::kind_of_channel(&self.channel), 1.0);
            self.gauge = Gauge::Counted(name.cloned());
        }
    }

    /// This semaphore waiter needs `n` permits under `limit`, until it is
    /// dropped (see [`Requeue::need`]).
    pub(crate) fn need(&mut self, n: u32, limit: u32) {
        if self.need.is_none() {
            self.entry.needs().push((n, limit));
            self.need = Some((n, limit));
        }
    }

    /// What this client's queue entry asks for now (see `KeyWaiters::want`).
    pub(crate) fn max_need(&self) -> Option<(u32, u32)> {
        self.entry.want(Names::kind_of_channel(&self.channel))
    }

    /// Make sure the key's channel is subscribed and Redis confirmed it.
    /// Returns `true` when it already was (no round trip), `false` when this
    /// call had to confirm it: then a release may have been missed and the
    /// caller must try once more before waiting.
    ///
    /// At most one attempt per key per [`RESUBSCRIBE_EVERY`]: within that
    /// time after a failed attempt, it fails at once without sending
    /// anything, however many waiters call it.
    ///
    /// Cancel-safe: dropping the future leaves the state consistent (the flag
    /// is raised before SUBSCRIBE is sent, so a cleanup always undoes it).
    pub(crate) async fn ensure_subscribed(&self) -> Result<bool, NotSubscribed> {
        if self.entry.presence.is_confirmed() {
            return Ok(true);
        }
        let mut sub = self.entry.subscribed.lock().await;
        if self.entry.presence.is_confirmed() {
            // Confirmed by the waiter we queued behind on the mutex.
            return Ok(true);
        }
        if !self.subscribe_due() {
            return Err(NotSubscribed::FailedRecently);
        }
        let registry = &self.registry;
        // SUBSCRIBE is sent whenever the channel is not confirmed, also when
        // an earlier one was sent: that one may have failed (its error reply
        // lands on the PING behind it, fred answers SUBSCRIBE itself when it
        // is queued), and a repeated SUBSCRIBE is harmless. The flag is raised
        // first, so a cleanup always undoes whatever reached Redis.
        *sub = true;
        self.entry.subscription_changes.fetch_add(1, SeqCst);
        let connection = registry.connection();
        // Same connection: checked, since fred sends the PING on a new one
        // if the old one died in between.
        let confirmed = registry
            .subscribe_confirmed(&self.channel)
            .await
            .and_then(|()| registry.same_connection(&connection));
        self.entry.estimate().failed_at = confirmed.is_err().then(Instant::now);
        confirmed.map_err(NotSubscribed::Failed)?;
        registry.record_node(&self.channel, &self.entry);
        self.entry.presence.set_confirmed(true);
        // Sleepers of a degraded key recompute their mode (a no-op for the
        // first subscription of a key: its other waiters are not asleep).
        self.entry.estimate_moved.notify_waiters();
        Ok(false)
    }

    /// Whether an attempt to subscribe may be made now: the channel is not
    /// confirmed, and no attempt failed within [`RESUBSCRIBE_EVERY`].
    pub(crate) fn subscribe_due(&self) -> bool {
        !self.entry.presence.is_confirmed()
            && self
                .entry
                .estimate()
                .failed_at
                .is_none_or(|at| at.elapsed() >= RESUBSCRIBE_EVERY)
    }

    /// A future completing on the next release message for this key (or on a
    /// permit stored by an earlier one).
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.entry.notify.notified()
    }

    /// Offer to take the lock directly from a release of this client, with
    /// `token` and a lease of `lease_ms`.
    pub(crate) fn offer(&self, token: &str, lease_ms: u64) -> Offer<Notify> {
        Inbox::offer(&self.entry.inbox, token, lease_ms, Notify::new())
    }

    /// Whether other local tasks are registered for this key.
    pub(crate) fn has_company(&self) -> bool {
        self.entry.presence.count() > 1
    }

    /// Hand a wake-up on to the next local waiter (used when a woken waiter
    /// gives up before using it).
    pub(crate) fn pass_on(&self) {
        self.entry.notify.notify_one();
    }

    /// Record that the holder's lease ended `pttl` after `sent`, the moment
    /// this client's try that saw it was sent (so the estimate errs early).
    pub(crate) fn note_pttl(&self, sent: Instant, pttl: Duration) {
        self.entry.observe(sent, pttl, true);
    }

    /// A local task took the lock with `lease`, by a try sent at `sent`: the
    /// other local waiters re-check when that lease ends (if the holder never
    /// releases it, for example a process that leaked its guard).
    pub(crate) fn note_acquired(&self, sent: Instant, lease: Duration) {
        self.entry.observe(sent, lease, true);
    }

    /// A local task took permits of this semaphore: news that stops the
    /// grace timers armed before (see [`Registry::on_message`]).
    pub(crate) fn note_taken(&self) {
        self.entry.announcements.fetch_add(1, SeqCst);
    }

    /// Whether the key's channel is subscribed and confirmed right now.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.entry.presence.is_confirmed()
    }

    /// A try of this client registered it in the lock's queue.
    pub(crate) fn mark_queued(&self) {
        self.entry.presence.mark_queued();
    }

    /// How many times the client was marked queued for this key so far
    /// (read before a try is sent, for [`took_unqueued`](Self::took_unqueued)).
    pub(crate) fn queue_marks(&self) -> usize {
        self.entry.presence.marks()
    }

    /// This waiter's try took the lock, and with it the script took the
    /// client out of the queue (see [`Presence::unqueue_if_alone`]);
    /// `before` is [`queue_marks`](Self::queue_marks) from before the try.
    pub(crate) fn took_unqueued(&self, before: usize) {
        self.entry.presence.unqueue_if_alone(before);
    }

    /// A try that may queue this client is about to be sent (`true`) or its
    /// outcome arrived (`false`).
    pub(crate) fn queued_try_in_flight(&self, in_flight: bool) {
        self.queued_try.store(in_flight, SeqCst);
    }

    /// A future completing the next time the next re-check moves earlier (or
    /// the subscription recovers). Create it BEFORE reading
    /// [`until_due`](Self::until_due).
    pub(crate) fn estimate_moved(&self) -> Notified<'_> {
        self.entry.estimate_moved.notified()
    }

    /// How long until a local waiter must re-check (the holder's lease ends,
    /// or this client's own re-check is due); zero if that moment passed,
    /// `None` when nothing is known.
    pub(crate) fn until_due(&self) -> Option<Duration> {
        self.entry.estimate().until_due(Instant::now())
    }

    /// Claim the right to probe the lock because the re-check is due (or
    /// nothing is known). Exactly one of the local waiters that race here
    /// wins; the winner pushes what passed `slice` ahead, so the others sleep
    /// on until its try records the holder's lease. Costs no round trip.
    pub(crate) fn claim_probe(&self, slice: Duration) -> bool {
        self.entry.estimate().claim_probe(Instant::now(), slice)
    }

    /// Take the polling role of this degraded key, if nobody holds it.
    pub(crate) fn take_poller_role(&self) -> Option<PollerRole> {
        self.entry
            .poller
            .compare_exchange(false, true, SeqCst, SeqCst)
            .ok()
            .map(|_| PollerRole {
                entry: Arc::clone(&self.entry),
            })
    }

    /// A future completing when the polling role is handed on (or a permit
    /// for it is stored).
    pub(crate) fn poller_freed(&self) -> Notified<'_> {
        self.entry.poller_freed.notified()
    }

    /// How long until the next poll of this degraded key is due (zero when
    /// it is).
    pub(crate) fn until_poll(&self) -> Duration {
        self.entry.estimate().until_poll(Instant::now())
    }

    /// Claim the poll of this degraded key that is due now, scheduling the
    /// next one `every` later. Costs no round trip.
    pub(crate) fn claim_poll(&self, every: Duration) -> bool {
        self.entry.estimate().claim_poll(Instant::now(), every)
    }
}

/// Why [`Waiter::ensure_subscribed`] did not confirm the subscription.
#[derive(Debug)]
pub(crate) enum NotSubscribed {
    /// An attempt failed within [`RESUBSCRIBE_EVERY`]; none was made now.
    FailedRecently,
    /// This attempt failed.
    Failed(fred::error::Error),
}

/// While a channel cannot be subscribed, at most one attempt per key this
/// often.
pub(crate) const RESUBSCRIBE_EVERY: Duration = Duration::from_secs(1);

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(need) = self.need {
            let mut needs = self.entry.needs();
            if let Some(i) = needs.iter().position(|n| *n == need) {
                needs.swap_remove(i);
            }
        }
        if let Gauge::Counted(name) = &self.gauge {
            m::waiters(name.as_ref(), Names::kind_of_channel(&self.channel), -1.0);
        }
        // Dropped (or failed) with a queueing try in flight: it may have
        // queued this client, so the clean-up must take it out.
        if self.entry.presence.leave(self.queued_try.load(SeqCst)) {
            // Never subscribed nor queued (the uncontended path: one try that
            // acquired): remove inline. Holding the mutex with the flag down means no
            // subscription exists to order against; `count` is re-checked
            // under the shard lock where `join` raises it.
            if let Ok(sub) = self.entry.subscribed.try_lock() {
                if !*sub
                    && self.entry.presence.is_idle_and_unqueued()
                    && self.entry.linger_until().is_none()
                {
                    let entry = &self.entry;
                    self.registry.map.remove_if(&self.channel, |_, e| {
                        Arc::ptr_eq(e, entry) && e.presence.count() == 0
                    });
                    return;
                }
            }
            self.registry.last_waiter_left(&self.channel, &self.entry);
        }
    }
}
