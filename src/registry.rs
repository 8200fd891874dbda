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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{
    ClientInterface, ClientLike, ClusterInterface, HashesInterface, PubsubInterface,
};
use fred::types::config::{Options, Server};
use fred::types::ClusterHash;
use fred::util::redis_keyslot;
use metrics::SharedString;
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};

use crate::metrics as m;
use crate::scripts::{Names, HANDOFF_GRACE_MS};

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
    /// When the current holder's lease is known to end. Written by every
    /// failed try, newest observation wins; claimed by the one waiter that
    /// probes when it passes.
    hint: std::sync::Mutex<Hint>,
    /// Woken (`notify_waiters`) when the hint moves EARLIER, so sleepers
    /// bounded by an older, longer lease recompute their bound.
    hint_moved: Notify,
    /// True once a try of this client registered it in the queue hash; the
    /// last local waiter to leave takes it out again.
    queued: AtomicBool,
    /// Counts the messages of this key's channel, so a grace timer can tell
    /// whether anything was announced after it started.
    announcements: AtomicU64,
}

/// What a message on a lock's channel announces.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Announcement<'a> {
    /// Released; free for whoever tries (`r:`), or anything unrecognised.
    Free,
    /// Released and reserved for this client (`r:<client>`).
    ReservedFor(&'a str),
    /// A reservation was taken; the new lease lasts this long (`t:<ms>`).
    Taken(Duration),
}

impl<'a> Announcement<'a> {
    pub(crate) fn parse(payload: &'a str) -> Self {
        if let Some(client) = payload.strip_prefix("r:") {
            if !client.is_empty() {
                return Announcement::ReservedFor(client);
            }
        } else if let Some(ms) = payload.strip_prefix("t:").and_then(|ms| ms.parse().ok()) {
            return Announcement::Taken(Duration::from_millis(ms));
        }
        Announcement::Free
    }
}

/// When a lease of `lease` seen at `at` ends, for waking waiters: capped at
/// [`MAX_LEASE`](crate::MAX_LEASE). A longer one (a key written by something
/// else, a garbage `t:` message) is re-checked after that instead of
/// overflowing the clock.
pub(crate) fn expiry_after(at: Instant, lease: Duration) -> Instant {
    at + lease.min(crate::MAX_LEASE)
}

/// The shared estimate of when the holder's lease ends.
#[derive(Debug, Default)]
struct Hint {
    /// When the try that produced `expiry` was sent.
    seen: Option<Instant>,
    expiry: Option<Instant>,
    /// While the channel is degraded (not confirmed): when the next poll of
    /// the lock may start.
    poll_at: Option<Instant>,
    /// When the last attempt to subscribe the channel failed (cleared by a
    /// success).
    failed_at: Option<Instant>,
}

impl Entry {
    fn hint(&self) -> std::sync::MutexGuard<'_, Hint> {
        self.hint.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new() -> Self {
        Entry {
            notify: Notify::new(),
            count: AtomicUsize::new(0),
            confirmed: AtomicBool::new(false),
            subscribed: Mutex::new(false),
            hint: std::sync::Mutex::new(Hint::default()),
            hint_moved: Notify::new(),
            queued: AtomicBool::new(false),
            announcements: AtomicU64::new(0),
        }
    }

    /// Record that the lock is taken until `pttl` after `sent` (see
    /// [`Waiter::note_pttl`]).
    fn note_expiry(&self, sent: Instant, pttl: Duration) {
        let expiry = expiry_after(sent, pttl) + Duration::from_millis(1);
        let moved_earlier = {
            let mut hint = self.hint.lock().unwrap_or_else(|p| p.into_inner());
            if hint.seen.is_some_and(|seen| seen > sent) {
                return;
            }
            let earlier = hint.expiry.is_none_or(|e| expiry < e);
            hint.seen = Some(sent);
            hint.expiry = Some(expiry);
            earlier
        };
        if moved_earlier {
            self.hint_moved.notify_waiters();
        }
    }

    /// Another client took a reservation with this lease. Sets the estimate
    /// only when none is known: a known one (even one already past) stays,
    /// so every waiting client probes once its last observed lease has ended
    /// and queues again if it somehow fell out of the queue, even while
    /// other clients keep handing the lock to each other. (The message's
    /// main effect is the new generation, which stops the grace timer.)
    fn note_taken(&self, lease: Duration) {
        let mut hint = self.hint.lock().unwrap_or_else(|p| p.into_inner());
        if hint.expiry.is_none() {
            let now = Instant::now();
            hint.seen = Some(now);
            hint.expiry = Some(expiry_after(now, lease));
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
    /// The command connection, to leave the queue hash.
    redis: Client,
    /// This client's id in the queue hashes.
    client_id: String,
    linger: Duration,
    /// Bound of every command relaylock sends on the subscriber connection,
    /// whatever the fred client's own settings.
    command_timeout: Duration,
    /// Reconnects of the subscriber connection seen so far.
    reconnects: AtomicU64,
    /// Sharded pub/sub (SSUBSCRIBE/SPUBLISH): Redis Cluster on Redis 7+.
    sharded: bool,
}

/// Which subscriber connection a command went to, as far as can be told:
/// fred's record of its `CLIENT ID` (empty when the server or the ACL
/// refuses `CLIENT ID`) and the reconnects seen so far.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Connection {
    ids: HashMap<Server, i64>,
    reconnects: u64,
}

impl Registry {
    pub(crate) fn new(
        subscriber: SubscriberClient,
        redis: Client,
        client_id: String,
        linger: Duration,
        command_timeout: Duration,
        sharded: bool,
    ) -> Self {
        Registry {
            map: DashMap::new(),
            wake_all: Notify::new(),
            subscriber,
            redis,
            client_id,
            linger,
            command_timeout,
            reconnects: AtomicU64::new(0),
            sharded,
        }
    }

    /// The command the scripts publish release messages with.
    pub(crate) fn publish_command(&self) -> &'static str {
        if self.sharded {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    async fn subscribe_channel(&self, channel: &str) -> Result<(), fred::error::Error> {
        if self.sharded {
            self.bounded(self.subscriber.ssubscribe(channel)).await
        } else {
            self.bounded(self.subscriber.subscribe(channel)).await
        }
    }

    async fn unsubscribe_channel(&self, channel: &str) -> Result<(), fred::error::Error> {
        if self.sharded {
            self.bounded(self.subscriber.sunsubscribe(channel)).await
        } else {
            self.bounded(self.subscriber.unsubscribe(channel)).await
        }
    }

    /// PING the subscriber connection, in a cluster each node's, each within
    /// `limit`.
    pub(crate) async fn ping_every_node(&self, limit: Duration) -> Result<(), fred::error::Error> {
        if !self.clustered() {
            return crate::error::bounded(limit, self.subscriber.ping::<()>(None)).await;
        }
        for server in self.subscriber.active_connections() {
            let options = Options {
                cluster_node: Some(server),
                ..Default::default()
            };
            let node = self.subscriber.with_options(&options);
            crate::error::bounded(limit, node.ping::<()>(None)).await?;
        }
        Ok(())
    }

    /// Which node each subscribed channel's slot maps to, in the
    /// subscriber's slot map (Redis Cluster).
    pub(crate) fn channel_nodes(&self) -> Vec<(String, Option<Server>)> {
        let routing = self.subscriber.cached_cluster_state();
        let mut nodes: Vec<(String, Option<Server>)> = self
            .map
            .iter()
            .map(|e| {
                let slot = redis_keyslot(e.key().as_bytes());
                let node = routing.as_ref().and_then(|r| r.get_server(slot).cloned());
                (e.key().clone(), node)
            })
            .collect();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        nodes
    }

    fn clustered(&self) -> bool {
        self.subscriber.is_clustered()
    }

    /// (S)SUBSCRIBE `channel` and PING behind it on the same connection. The
    /// PING answers only after Redis processed the SUBSCRIBE, and carries its
    /// error if it failed: fred resolves SUBSCRIBE itself when it writes it,
    /// so an error reply goes to the next command waiting for a reply. Both
    /// are queued in the same poll (`join!`), so the PING is already waiting
    /// when that error can arrive; queued one after the other, the error
    /// sometimes came back first, found no command waiting, and a denied
    /// channel was confirmed.
    async fn subscribe_confirmed(&self, channel: &str) -> Result<(), fred::error::Error> {
        let (subscribed, pinged) =
            tokio::join!(self.subscribe_channel(channel), self.ping_behind(channel));
        subscribed.and(pinged)
    }

    /// PING behind a (S)SUBSCRIBE of `channel`, on the same connection: in
    /// a cluster, the connection to the node of the channel's slot; without
    /// sharded pub/sub, the node fred sends SUBSCRIBE to, which it picks by
    /// the slot of the client's id.
    async fn ping_behind(&self, channel: &str) -> Result<(), fred::error::Error> {
        if self.clustered() {
            let routed_by = if self.sharded {
                channel.as_bytes().to_vec()
            } else {
                self.subscriber.id().as_bytes().to_vec()
            };
            let options = Options {
                cluster_hash: Some(ClusterHash::Custom(redis_keyslot(&routed_by))),
                ..Default::default()
            };
            self.bounded(self.subscriber.with_options(&options).ping::<()>(None))
                .await
        } else {
            self.bounded(self.subscriber.ping::<()>(None)).await
        }
    }

    /// This client's id in the queue hashes.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Whether any channel is subscribed or being subscribed (entries live
    /// while they have waiters, and for the linger after the last one left).
    pub(crate) fn has_channels(&self) -> bool {
        !self.map.is_empty()
    }

    /// Whether local tasks are registered for `channel` (a releasing client
    /// with waiters queues again behind the other clients).
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.map
            .get(channel)
            .is_some_and(|e| e.count.load(SeqCst) > 0)
    }

    /// Run a command, bounded by the command timeout whatever the fred
    /// client's own settings.
    async fn bounded<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T, fred::error::Error> {
        crate::error::bounded(self.command_timeout, command).await
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
            queued_try: AtomicBool::new(false),
        };
        (waiter, before > 0)
    }

    /// A future that completes at the next [`wake_all`](Self::wake_all). It
    /// sees every `wake_all` that happens after this call, even before it is
    /// first polled.
    pub(crate) fn reconnected(&self) -> Notified<'_> {
        self.wake_all.notified()
    }

    /// A message arrived on `channel`.
    ///
    /// * A release free for all, or reserved for this client, wakes one local
    ///   waiter (or stores a permit for the next one).
    /// * A release reserved for another client wakes nobody now. One timer
    ///   wakes one local waiter when the grace period ends, unless another
    ///   message came meanwhile (normally `t:`, the reservation was taken):
    ///   that waiter probes in case the other client never came.
    /// * A taken reservation moves the key's expiry estimate to the new lease.
    pub(crate) fn on_message(&self, channel: &str, payload: &str) {
        let Some(e) = self.map.get(channel) else {
            return;
        };
        let generation = e.announcements.fetch_add(1, SeqCst) + 1;
        match Announcement::parse(payload) {
            Announcement::Free => e.notify.notify_one(),
            Announcement::ReservedFor(c) if c == self.client_id => e.notify.notify_one(),
            Announcement::ReservedFor(_) => {
                let entry = Arc::clone(e.value());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS + 1)).await;
                    if entry.announcements.load(SeqCst) == generation {
                        entry.notify.notify_one();
                    }
                });
            }
            Announcement::Taken(lease) => e.note_taken(lease),
        }
    }

    /// The subscriber connection's identity now.
    pub(crate) fn connection(&self) -> Connection {
        Connection {
            ids: self.subscriber.connection_ids(),
            reconnects: self.reconnects.load(SeqCst),
        }
    }

    /// Fails when the subscriber connection changed since `before`: a
    /// SUBSCRIBE written on the old one is gone, while the PING behind it,
    /// written on the new one, still succeeds and would confirm nothing.
    /// (Either sign can miss a change: ids restart at 1 after a server
    /// restart, and the reconnect event may be handled after the PING's
    /// reply. Together they catch what this client has seen.)
    fn same_connection(&self, before: &Connection) -> Result<(), fred::error::Error> {
        if *before == self.connection() {
            return Ok(());
        }
        Err(fred::error::Error::new(
            fred::error::ErrorKind::IO,
            "relaylock: the subscriber connection changed while subscribing",
        ))
    }

    /// Wake every waiter of every key to re-check.
    pub(crate) fn wake_all(&self) {
        self.wake_all.notify_waiters();
    }

    /// After the subscriber reconnected: subscribe again every channel the
    /// registry holds subscribed, confirm with a PING, then wake every waiter.
    ///
    /// Entries stay unconfirmed until the PING came back, and are confirmed
    /// again only under their mutex and only if still subscribed, so a
    /// concurrent cleanup (which may have unsubscribed meanwhile) is never
    /// overridden. If anything fails, they stay unconfirmed: their waiters
    /// subscribe again themselves, polling meanwhile.
    pub(crate) async fn resubscribe_all(&self) {
        // A confirmation in flight may have gone to the old connection.
        self.reconnects.fetch_add(1, SeqCst);
        let entries: Vec<(String, Arc<Entry>)> = self
            .map
            .iter()
            .map(|r| (r.key().clone(), Arc::clone(r.value())))
            .collect();
        // Every channel is unconfirmed from here on: also those after a
        // failure below, whose subscription may be gone too.
        for (_, entry) in &entries {
            if *entry.subscribed.lock().await {
                entry.confirmed.store(false, SeqCst);
            }
        }
        let connection = self.connection();
        let mut resubscribed = Vec::new();
        for (channel, entry) in entries {
            let sub = entry.subscribed.lock().await;
            if !*sub {
                continue;
            }
            // In a cluster each channel is confirmed on its own node; a
            // failure skips that channel only (its waiters subscribe again
            // themselves, polling meanwhile).
            let outcome = if self.clustered() {
                self.subscribe_confirmed(&channel).await
            } else {
                self.subscribe_channel(&channel).await
            };
            match outcome {
                Ok(()) => resubscribed.push(entry.clone()),
                Err(e) => tracing::warn!(error = %e, %channel,
                    "relaylock: resubscribe failed; its waiters subscribe again themselves"),
            }
        }
        if !resubscribed.is_empty() {
            // One PING behind all of them on a single server (in a cluster
            // each channel had its own).
            let pinged = if self.clustered() {
                Ok(())
            } else {
                self.bounded(self.subscriber.ping::<()>(None)).await
            };
            match pinged.and_then(|()| self.same_connection(&connection)) {
                Ok(()) => {
                    for entry in &resubscribed {
                        let sub = entry.subscribed.lock().await;
                        if *sub {
                            entry.confirmed.store(true, SeqCst);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "relaylock: could not confirm resubscription"),
            }
        }
        tracing::debug!(
            channels = resubscribed.len(),
            "relaylock: resubscribed after reconnect"
        );
        self.wake_all();
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
        // Leave the key's queue at once (no linger): a client still queued
        // without waiters would be handed the lock and let it idle for the
        // grace period. A waiter arriving meanwhile queues again on its try.
        if entry.count.load(SeqCst) == 0 && entry.queued.swap(false, SeqCst) {
            let queue = Names::queue_of_channel(&channel);
            let leave = self
                .redis
                .hdel::<i64, _, _>(queue.as_str(), self.client_id.as_str());
            if let Err(e) = self.bounded(leave).await {
                tracing::debug!(error = %e, "relaylock: could not leave the queue; the next hand-over skips this client");
            }
            // A waiter that arrived meanwhile may have queued before the HDEL
            // ran and been taken out with it: wake one to try (and queue) again.
            if entry.count.load(SeqCst) > 0 {
                entry.notify.notify_one();
            }
        }
        if !self.linger.is_zero() {
            tokio::time::sleep(self.linger).await;
        }
        if entry.count.load(SeqCst) > 0 {
            return;
        }
        let mut sub = entry.subscribed.lock().await;
        let was_confirmed = entry.confirmed.swap(false, SeqCst);
        if entry.count.load(SeqCst) > 0 {
            entry.confirmed.store(was_confirmed, SeqCst);
            return;
        }
        if *sub {
            if let Err(e) = self.unsubscribe_channel(channel.as_str()).await {
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
    /// A try that may queue this client is in flight: if the waiter is
    /// dropped before its outcome is known, the client may be queued.
    queued_try: AtomicBool,
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
        let registry = &self.registry;
        // SUBSCRIBE is sent whenever the channel is not confirmed, also when
        // an earlier one was sent: that one may have failed (its error reply
        // lands on the PING behind it, fred answers SUBSCRIBE itself when it
        // is queued), and a repeated SUBSCRIBE is harmless. The flag is raised
        // first, so a cleanup always undoes whatever reached Redis.
        *sub = true;
        let connection = registry.connection();
        // Same connection: checked, since fred sends the PING on a new one
        // if the old one died in between.
        let confirmed = registry
            .subscribe_confirmed(&self.channel)
            .await
            .and_then(|()| registry.same_connection(&connection));
        self.entry.hint().failed_at = confirmed.is_err().then(Instant::now);
        confirmed?;
        self.entry.confirmed.store(true, SeqCst);
        Ok(false)
    }

    /// Whether the channel is unconfirmed and an attempt to subscribe it
    /// failed within `window`: a newcomer then polls at once instead of
    /// spending a command timeout on another attempt likely to fail too.
    pub(crate) fn failed_recently(&self, window: Duration) -> bool {
        !self.entry.confirmed.load(SeqCst)
            && self
                .entry
                .hint()
                .failed_at
                .is_some_and(|at| at.elapsed() < window)
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

    /// Record that the holder's lease ended `pttl` after `sent`, the moment
    /// the try that saw it was sent (so the estimate errs early). An older
    /// observation never overwrites a newer one. When the estimate moves
    /// earlier, sleepers are woken to recompute their bound.
    pub(crate) fn note_pttl(&self, sent: Instant, pttl: Duration) {
        self.entry.note_expiry(sent, pttl);
    }

    /// Whether the key's channel is subscribed and confirmed right now.
    pub(crate) fn is_confirmed(&self) -> bool {
        self.entry.confirmed.load(SeqCst)
    }

    /// A try of this client registered it in the key's queue hash.
    pub(crate) fn mark_queued(&self) {
        self.entry.queued.store(true, SeqCst);
    }

    /// Whether a try of this client registered it in the key's queue hash
    /// (and nothing took it out since).
    pub(crate) fn is_queued(&self) -> bool {
        self.entry.queued.load(SeqCst)
    }

    /// A try that may queue this client is about to be sent (`true`) or its
    /// outcome arrived (`false`).
    pub(crate) fn queued_try_in_flight(&self, in_flight: bool) {
        self.queued_try.store(in_flight, SeqCst);
    }

    /// A future completing the next time the shared estimate moves earlier.
    /// Create it BEFORE reading [`until_expiry`](Self::until_expiry).
    pub(crate) fn hint_moved(&self) -> Notified<'_> {
        self.entry.hint_moved.notified()
    }

    /// How long until the holder's lease ends, as last seen by any local
    /// waiter of this key (zero if that moment passed); `None` when unknown.
    pub(crate) fn until_expiry(&self) -> Option<Duration> {
        let hint = self.entry.hint();
        hint.expiry
            .map(|e| e.saturating_duration_since(Instant::now()))
    }

    /// Claim the right to probe the lock because its known lease has ended (or
    /// none is known). Exactly one of the local waiters that race here wins;
    /// the winner pushes the estimate `slice` ahead, so the others sleep on
    /// until its try records the next holder's lease. Costs no round trip.
    pub(crate) fn claim_probe(&self, slice: Duration) -> bool {
        let now = Instant::now();
        let mut hint = self.entry.hint();
        if hint.expiry.is_some_and(|e| e > now) {
            return false;
        }
        hint.expiry = Some(now + slice);
        true
    }

    /// While the channel's subscription is not confirmed: claim the right to
    /// poll the lock now, whatever the known lease (a hand-over reservation
    /// for this client must be taken within the grace period, and no message
    /// announces it). One local waiter per `slice` wins.
    pub(crate) fn claim_poll(&self, slice: Duration) -> bool {
        let now = Instant::now();
        let mut hint = self.entry.hint();
        if hint.poll_at.is_some_and(|p| p > now) {
            return false;
        }
        hint.poll_at = Some(now + slice);
        true
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(name) = &self.gauge {
            m::waiters(name.as_ref(), -1.0);
        }
        if self.queued_try.load(SeqCst) {
            // Dropped (or failed) with a queueing try in flight: it may have
            // queued this client, so the clean-up must take it out.
            self.entry.queued.store(true, SeqCst);
        }
        if self.entry.count.fetch_sub(1, SeqCst) == 1 {
            // Never subscribed nor queued (the uncontended path: one try that
            // acquired): remove inline. Holding the mutex with the flag down means no
            // subscription exists to order against; `count` is re-checked
            // under the shard lock where `join` raises it.
            if let Ok(sub) = self.entry.subscribed.try_lock() {
                if !*sub && !self.entry.queued.load(SeqCst) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements() {
        assert_eq!(Announcement::parse("r:"), Announcement::Free);
        assert_eq!(
            Announcement::parse("r:abc"),
            Announcement::ReservedFor("abc")
        );
        assert_eq!(
            Announcement::parse("t:30000"),
            Announcement::Taken(Duration::from_secs(30))
        );
        assert_eq!(Announcement::parse("t:x"), Announcement::Free);
        assert_eq!(Announcement::parse("1795238504002345"), Announcement::Free);
        assert_eq!(Announcement::parse(""), Announcement::Free);
    }
}
