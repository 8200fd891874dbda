//! Key -> local waiters, and the reference-counted subscription of each key's
//! release channel.
//!
//! # Guarantees
//!
//! * A channel is subscribed (and the subscription confirmed by Redis) before
//!   any waiter relies on it: [`Waiter::ensure_subscribed`] returns only after
//!   a `PING` sent behind the `SUBSCRIBE` on the same connection came back.
//! * The first waiter of a key subscribes, the last one to leave unsubscribes
//!   (after [`linger`](crate::LockClientBuilder::unsubscribe_linger), so a
//!   key in steady use is not resubscribed on every hand-over).
//! * The race of the last waiter leaving while a new one arrives leaks nothing
//!   and strands nobody: see [`Registry::cleanup`].
//! * A release message wakes ONE local waiter ([`Notify::notify_one`], which
//!   stores a permit when nobody is parked yet, so a message arriving between a
//!   failed try and the wait is not lost). A reconnect or a lagged message
//!   stream wakes EVERY waiter of every key ([`Registry::wake_all`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use fred::clients::SubscriberClient;
use fred::interfaces::{ClientLike, PubsubInterface};
use metrics::SharedString;
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};

use crate::metrics as m;

/// The local waiters of one key.
#[derive(Debug)]
pub(crate) struct Entry {
    /// One permit per release message; waiters queue on it in FIFO order.
    pub(crate) notify: Notify,
    /// Local waiters registered for this key. Incremented under the map's
    /// shard lock, so it is never incremented on an entry already removed.
    count: AtomicUsize,
    /// Fast-path mirror of `subscribed`: true while the subscription is known
    /// to be confirmed. Cleared by cleanup BEFORE it reads `count`.
    confirmed: AtomicBool,
    /// Whether SUBSCRIBE was sent (and not undone) on the subscriber connection.
    /// Every SUBSCRIBE/UNSUBSCRIBE of this channel happens under this mutex,
    /// so they reach Redis in the order the registry decided them.
    subscribed: Mutex<bool>,
    /// When the current holder's lease is known to end, in
    /// `Registry::hint_now_ms` units (0: unknown). Written by every failed
    /// try; claimed by the one waiter that probes when it passes.
    expiry_hint_ms: AtomicU64,
}

impl Entry {
    fn new() -> Self {
        Entry {
            notify: Notify::new(),
            count: AtomicUsize::new(0),
            confirmed: AtomicBool::new(false),
            subscribed: Mutex::new(false),
            expiry_hint_ms: AtomicU64::new(0),
        }
    }
}

/// The registry of one [`LockClient`](crate::LockClient).
#[derive(Debug)]
pub(crate) struct Registry {
    map: DashMap<String, Arc<Entry>>,
    /// Woken with `notify_waiters` on a reconnect or a lag: every waiter
    /// re-checks.
    wake_all: Notify,
    subscriber: SubscriberClient,
    linger: Duration,
    epoch: Instant,
}

impl Registry {
    pub(crate) fn new(subscriber: SubscriberClient, linger: Duration) -> Self {
        Registry {
            map: DashMap::new(),
            wake_all: Notify::new(),
            subscriber,
            linger,
            epoch: Instant::now(),
        }
    }

    /// Register a task for `channel` (before its first try). It stays
    /// registered until the returned [`Waiter`] is dropped. The flag is true
    /// when other local tasks were already registered: the newcomer should
    /// queue behind them instead of trying first.
    pub(crate) fn join(self: &Arc<Self>, channel: &str) -> (Waiter, bool) {
        let (entry, before) = {
            let e = self
                .map
                .entry(channel.to_owned())
                .or_insert_with(|| Arc::new(Entry::new()));
            let before = e.count.fetch_add(1, SeqCst);
            (Arc::clone(&e), before)
        };
        let waiter = Waiter {
            registry: Arc::clone(self),
            channel: channel.to_owned(),
            entry,
            gauge: None,
        };
        (waiter, before > 0)
    }

    /// A future that completes at the next [`wake_all`](Self::wake_all). It
    /// sees every `wake_all` that happens after this call, even before it is
    /// first polled.
    pub(crate) fn reconnected(&self) -> Notified<'_> {
        self.wake_all.notified()
    }

    /// A release message arrived on `channel`: wake one local waiter (or store
    /// a permit for the next one).
    pub(crate) fn on_message(&self, channel: &str) {
        if let Some(e) = self.map.get(channel) {
            e.notify.notify_one();
        }
    }

    /// Wake every waiter of every key to re-check.
    pub(crate) fn wake_all(&self) {
        self.wake_all.notify_waiters();
    }

    /// After the subscriber reconnected: subscribe again every channel the
    /// registry holds subscribed, confirm with a PING, then wake every waiter.
    pub(crate) async fn resubscribe_all(&self) {
        let entries: Vec<(String, Arc<Entry>)> = self
            .map
            .iter()
            .map(|r| (r.key().clone(), Arc::clone(r.value())))
            .collect();
        let mut count = 0usize;
        for (channel, entry) in entries {
            let sub = entry.subscribed.lock().await;
            if *sub {
                if let Err(e) = self.subscriber.subscribe(channel.as_str()).await {
                    tracing::warn!(error = %e, "relaylock: resubscribe failed; waiters fall back to lease timeouts until the next reconnect");
                    break;
                }
                count += 1;
            }
        }
        if count > 0 {
            if let Err(e) = self.subscriber.ping::<()>(None).await {
                tracing::warn!(error = %e, "relaylock: could not confirm resubscription");
            }
        }
        tracing::debug!(channels = count, "relaylock: resubscribed after reconnect");
        self.wake_all();
    }

    /// Milliseconds since the registry was made, plus one (0 means "unknown").
    fn hint_now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// The last-waiter-left path, run in the background.
    ///
    /// The race with a newcomer is closed by two rules:
    /// 1. `confirmed` is cleared BEFORE `count` is read (both SeqCst), and a
    ///    newcomer raises `count` BEFORE it reads `confirmed`. So either the
    ///    newcomer sees `confirmed == false` and goes through the mutex (where
    ///    it waits for this cleanup and subscribes again if it unsubscribed),
    ///    or this cleanup sees `count > 0` and keeps the subscription.
    /// 2. The entry leaves the map only after the UNSUBSCRIBE was handed to the
    ///    subscriber connection, and only if still unused (checked under the
    ///    map's shard lock, where `join` raises `count`). A newcomer after the
    ///    removal makes a new entry whose SUBSCRIBE is sent after that
    ///    UNSUBSCRIBE on the same connection.
    async fn cleanup(self: Arc<Self>, channel: String, entry: Arc<Entry>) {
        if !self.linger.is_zero() {
            tokio::time::sleep(self.linger).await;
        }
        if entry.count.load(SeqCst) > 0 {
            return;
        }
        let mut sub = entry.subscribed.lock().await;
        entry.confirmed.store(false, SeqCst);
        if entry.count.load(SeqCst) > 0 {
            entry.confirmed.store(*sub, SeqCst);
            return;
        }
        if *sub {
            if let Err(e) = self.subscriber.unsubscribe(channel.as_str()).await {
                // The connection is down: its subscriptions went with it, and a
                // reconnect resubscribes only what the map still holds.
                tracing::debug!(error = %e, "relaylock: unsubscribe failed");
            }
            *sub = false;
        }
        self.map.remove_if(&channel, |_, e| {
            Arc::ptr_eq(e, &entry) && e.count.load(SeqCst) == 0
        });
    }
}

/// One registered waiter. Dropping it deregisters it; the last one to leave
/// a key schedules the unsubscription.
#[derive(Debug)]
pub(crate) struct Waiter {
    registry: Arc<Registry>,
    channel: String,
    entry: Arc<Entry>,
    /// Set once the task really waits: it then counts in the waiters gauge
    /// (under this `name` label, if any) until dropped.
    gauge: Option<Option<SharedString>>,
}

impl Waiter {
    /// Count this task in the `relaylock_waiters` gauge until it is dropped.
    pub(crate) fn count_as_waiting(&mut self, name: Option<&SharedString>) {
        if self.gauge.is_none() {
            m::waiters(name, 1.0);
            self.gauge = Some(name.cloned());
        }
    }

    /// Make sure the key's channel is subscribed and Redis confirmed it.
    /// Returns `true` when it already was (no round trip), `false` when this
    /// call had to confirm it: then a release may have been missed and the
    /// caller must try once more before waiting.
    ///
    /// Cancel-safe: dropping the future leaves the state consistent (the flag
    /// is raised before SUBSCRIBE is sent, so a cleanup always undoes it).
    pub(crate) async fn ensure_subscribed(&self) -> Result<bool, fred::error::Error> {
        if self.entry.confirmed.load(SeqCst) {
            return Ok(true);
        }
        let mut sub = self.entry.subscribed.lock().await;
        if self.entry.confirmed.load(SeqCst) {
            // Confirmed by the waiter we queued behind on the mutex.
            return Ok(true);
        }
        let subscriber = &self.registry.subscriber;
        if !*sub {
            *sub = true;
            subscriber.subscribe(self.channel.as_str()).await?;
        }
        // SUBSCRIBE answers when written; a PING behind it on the same
        // connection answers only after Redis processed the SUBSCRIBE.
        subscriber.ping::<()>(None).await?;
        self.entry.confirmed.store(true, SeqCst);
        Ok(false)
    }

    /// A future completing on the next release message for this key (or on a
    /// permit stored by an earlier one).
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.entry.notify.notified()
    }

    /// Hand a wake-up on to the next local waiter (used when a woken waiter
    /// gives up before using it).
    pub(crate) fn pass_on(&self) {
        self.entry.notify.notify_one();
    }

    /// Record that the holder's lease ends in `pttl` (as a try just saw).
    pub(crate) fn note_pttl(&self, pttl: Duration) {
        let at = self.registry.hint_now_ms() + pttl.as_millis() as u64 + 1;
        self.entry.expiry_hint_ms.store(at, SeqCst);
    }

    /// How long until the holder's lease ends, as last seen by any local
    /// waiter of this key (zero if that moment passed); `None` when unknown.
    pub(crate) fn until_expiry(&self) -> Option<Duration> {
        match self.entry.expiry_hint_ms.load(SeqCst) {
            0 => None,
            at => Some(Duration::from_millis(
                at.saturating_sub(self.registry.hint_now_ms()),
            )),
        }
    }

    /// Claim the right to probe the lock because its known lease has ended (or
    /// none is known). Exactly one of the local waiters that race here wins;
    /// the winner pushes the hint `slice` ahead, so the others sleep on until
    /// its try records the next holder's lease. Costs no round trip.
    pub(crate) fn claim_probe(&self, slice: Duration) -> bool {
        let now = self.registry.hint_now_ms();
        let current = self.entry.expiry_hint_ms.load(SeqCst);
        if current > now {
            return false;
        }
        let next = now + slice.as_millis() as u64;
        self.entry
            .expiry_hint_ms
            .compare_exchange(current, next, SeqCst, SeqCst)
            .is_ok()
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(name) = &self.gauge {
            m::waiters(name.as_ref(), -1.0);
        }
        if self.entry.count.fetch_sub(1, SeqCst) == 1 {
            // Never subscribed (the uncontended path: one try that acquired):
            // remove inline. Holding the mutex with the flag down means no
            // subscription exists to order against; `count` is re-checked
            // under the shard lock where `join` raises it.
            if let Ok(sub) = self.entry.subscribed.try_lock() {
                if !*sub {
                    let entry = &self.entry;
                    self.registry.map.remove_if(&self.channel, |_, e| {
                        Arc::ptr_eq(e, entry) && e.count.load(SeqCst) == 0
                    });
                    return;
                }
            }
            let registry = Arc::clone(&self.registry);
            let channel = std::mem::take(&mut self.channel);
            let entry = Arc::clone(&self.entry);
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn(registry.cleanup(channel, entry));
                }
                Err(_) => tracing::debug!(
                    "relaylock: no runtime to unsubscribe on; the subscription ends with the client"
                ),
            }
        }
    }
}
