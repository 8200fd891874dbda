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
//!   and strands nobody: see [`Registry::linger_then_unsubscribe`]. At most
//!   one clean-up task runs per key, however often its last waiter leaves.
//! * What the waiters of a key know of its holder is shared ([`Estimate`]):
//!   the CURRENT holder's lease end, as the newest observation says (a try's
//!   `PTTL`, a `t:<lease>` message, a local acquisition), so no waiter
//!   sleeps past it on an earlier holder's longer lease.
//! * A release message wakes ONE local waiter ([`Notify::notify_one`], which
//!   stores a permit when nobody is parked yet, so a message arriving between a
//!   failed try and the wait is not lost). A reconnect or a lagged message
//!   stream wakes EVERY waiter of every key ([`Registry::wake_all`]).

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use fred::bytes_utils::Str;
use fred::clients::{Client, Pipeline, SubscriberClient};
use fred::interfaces::{ClientInterface, ClientLike, ClusterInterface, PubsubInterface};
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, Value};
use fred::util::redis_keyslot;
use metrics::SharedString;
use rapidhash::fast::RandomState;
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};

use crate::metrics as m;
use crate::scripts::{evalsha_reloading, Kind, Lua, Names, Scripts, HANDOFF_GRACE_MS};
use crate::state::estimate::Estimate;
use crate::state::handoff::{Claim, Inbox, Offer, Wake};
use crate::state::presence::Presence;
use crate::state::sync;
use tokio_util::task::TaskTracker;

/// `d` from now, saturating where the clock cannot represent it (a
/// deadline in a drop path or a background task must never panic).
fn after(d: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// The local waiters of one key.
#[derive(Debug)]
pub(crate) struct KeyWaiters {
    /// One permit per release message; waiters queue on it in FIFO order.
    pub(crate) notify: Notify,
    /// The waiter count, the confirmation flag, the queue flags, and the
    /// handshakes between them (see [`Presence`]).
    presence: Presence,
    /// Whether SUBSCRIBE was sent (and not undone) on the subscriber connection.
    /// Every SUBSCRIBE/UNSUBSCRIBE of this channel happens under this mutex,
    /// so they reach Redis in the order the registry decided them.
    subscribed: Mutex<bool>,
    /// Counts the SUBSCRIBEs and UNSUBSCRIBEs of this channel (changed only
    /// under `subscribed`): a resubscription confirms a channel only if no
    /// other one came after its own (see [`Registry::resubscribe_all`]).
    subscription_changes: AtomicU64,
    /// What this client knows of the holder's lease (see [`Estimate`]).
    estimate: sync::Mutex<Estimate>,
    /// Woken (`notify_waiters`) when the next re-check moves EARLIER, or the
    /// channel's subscription was confirmed after a failure, so sleepers
    /// recompute how long (and in which mode) they wait.
    estimate_moved: Notify,
    /// Counts the messages of this key's channel, so a grace timer can tell
    /// whether anything was announced after it started.
    announcements: AtomicU64,
    /// While the subscription cannot be confirmed, ONE local waiter holds
    /// this role and polls; the others sleep until it is handed on.
    poller: AtomicBool,
    /// Notified (one permit) when the polling role is free again.
    poller_freed: Notify,
    /// When the lingering subscription may end; `Some` while the one
    /// clean-up task of this entry runs (see [`Registry::linger_then_unsubscribe`]).
    linger_until: std::sync::Mutex<Option<Instant>>,
    /// Redis Cluster: the node the subscription was last confirmed on.
    node: std::sync::Mutex<Option<Server>>,
    /// Local waiters a release of this client may hand the lock to directly.
    inbox: Arc<Inbox<Notify>>,
    /// A semaphore's local waiters: what each needs, `(permits, limit)`,
    /// one entry per registered waiter that said (a few per key; the
    /// largest goes into the queue entry, see [`KeyWaiters::max_need`]).
    needs: std::sync::Mutex<Vec<(u32, u32)>>,
}

/// What a message on a lock's channel announces.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Announcement<'a> {
    /// Released; free for whoever tries (`r:`), or anything unrecognised.
    Free,
    /// Released and reserved for this client (`r:<client>`).
    ReservedFor(&'a str),
    /// A semaphore's release reserved permits for its own client (`o:<client>`),
    /// which woke its waiter itself; other clients stay queued behind it.
    Kept(&'a str),
    /// A reservation was taken; the new lease lasts this long (`t:<ms>`).
    Taken(Duration),
}

impl Wake for Notify {
    fn wake(&self) {
        self.notify_one();
    }
}

impl<'a> Announcement<'a> {
    pub(crate) fn parse(payload: &'a str) -> Self {
        if let Some(client) = payload.strip_prefix("r:") {
            if !client.is_empty() {
                return Announcement::ReservedFor(client);
            }
        } else if let Some(client) = payload.strip_prefix("o:").filter(|c| !c.is_empty()) {
            return Announcement::Kept(client);
        } else if let Some(ms) = payload.strip_prefix("t:").and_then(|ms| ms.parse().ok()) {
            return Announcement::Taken(Duration::from_millis(ms));
        }
        Announcement::Free
    }
}

impl KeyWaiters {
    fn estimate(&self) -> sync::MutexGuard<'_, Estimate> {
        sync::lock(&self.estimate)
    }

    fn new() -> Self {
        KeyWaiters {
            notify: Notify::new(),
            presence: Presence::new(),
            subscribed: Mutex::new(false),
            subscription_changes: AtomicU64::new(0),
            estimate: sync::Mutex::new(Estimate::default()),
            estimate_moved: Notify::new(),
            announcements: AtomicU64::new(0),
            poller: AtomicBool::new(false),
            poller_freed: Notify::new(),
            linger_until: std::sync::Mutex::new(None),
            node: std::sync::Mutex::new(None),
            inbox: Arc::new(Inbox::default()),
            needs: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Wake one local waiter if any waits (a permit for nobody would cost
    /// the next newcomer a try).
    fn wake_one_if_waiting(&self) {
        if self.presence.count() > 0 {
            self.notify.notify_one();
        }
    }

    fn needs(&self) -> std::sync::MutexGuard<'_, Vec<(u32, u32)>> {
        self.needs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What this client's queue entry asks for, with its limit: the largest
    /// need among the semaphore waiters registered now, or for a
    /// read-write lock's readers (`kind` Read, all needing 1) their number,
    /// so a write's release reserves for all of them at once, ahead of a
    /// writer that queued after them (found in review: with the largest
    /// need, one reader per client got in per write). `None` when none said.
    fn want(&self, kind: Kind) -> Option<(u32, u32)> {
        let needs = self.needs();
        let largest = needs.iter().copied().max()?;
        if kind == Kind::Read {
            let total = needs.iter().map(|(n, _)| u64::from(*n)).sum::<u64>();
            let limit = largest.1;
            return Some((u32::try_from(total).unwrap_or(limit).min(limit), limit));
        }
        Some(largest)
    }

    fn linger_until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.linger_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Record an observation of the holder's lease (see
    /// [`Estimate::observe`]); wake sleepers when the next re-check moved
    /// earlier.
    fn observe(&self, seen: Instant, lease: Duration, own: bool) {
        let moved_earlier = self.estimate().observe(seen, lease, own);
        if moved_earlier {
            self.estimate_moved.notify_waiters();
        }
    }
}

/// The registry of one [`LockClient`](crate::LockClient).
#[derive(Debug)]
pub(crate) struct Registry {
    map: DashMap<Str, Arc<KeyWaiters>, RandomState>,
    /// Woken with `notify_waiters` on a reconnect or a lag: every waiter
    /// re-checks.
    wake_all: Notify,
    subscriber: SubscriberClient,
    /// The command connection, to leave a lock's (or semaphore's) queue.
    redis: Client,
    /// [`LEAVE`](crate::scripts::LEAVE), hashed once.
    leave: Lua,
    /// [`SEM_LEAVE`](crate::scripts::SEM_LEAVE), hashed once.
    sem_leave: Lua,
    /// This client's id in the locks' queues.
    client_id: Str,
    /// Its id as a read-write lock's writer, `<client_id>.w` (made once:
    /// every try and message of a writer compares with it).
    writer_id: Str,
    /// `:<client_id>`: a lock's messages for this client come on its
    /// channel with this suffix (protocol 3, see [`Registry::wire`]).
    wire_suffix: String,
    linger: Duration,
    /// Bound of every command relaylock sends on the subscriber connection,
    /// whatever the fred client's own settings.
    command_timeout: Duration,
    /// Reconnects of the subscriber connection seen so far.
    reconnects: AtomicU64,
    /// Sharded pub/sub (SSUBSCRIBE/SPUBLISH): Redis Cluster on Redis 7+.
    sharded: bool,
    /// The client is gone: clean-up tasks stop retrying.
    closed: AtomicBool,
    /// The client's tasks that a shutdown waits for: queue leaves here.
    background: TaskTracker,
}

/// Which subscriber connection a command went to, as far as can be told:
/// fred's record of its `CLIENT ID` (empty when the server or the ACL
/// refuses `CLIENT ID`) and the reconnects seen so far.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Connection {
    ids: HashMap<Server, i64>,
    reconnects: u64,
}

/// Queue `PING <nonce>` in `pipeline` (in a cluster, routed by `slot`);
/// returns the nonce. Nothing is sent.
async fn queue_nonce_ping(
    pipeline: &Pipeline<SubscriberClient>,
    slot: Option<u16>,
) -> Result<String, fred::error::Error> {
    let nonce = crate::token::new().to_string();
    match slot {
        Some(slot) => {
            let options = Options {
                cluster_hash: Some(ClusterHash::Custom(slot)),
                ..Default::default()
            };
            pipeline
                .with_options(&options)
                .ping::<()>(Some(nonce.clone()))
                .await?;
        }
        None => pipeline.ping::<()>(Some(nonce.clone())).await?,
    }
    Ok(nonce)
}

/// How a resubscription batch went (see `Registry::resubscribe_all`).
enum Batch {
    /// Every channel confirmed by the batch's PING.
    Confirmed,
    /// No reply came (timeout, closed connection): every channel failed.
    NoReply(fred::error::Error),
    /// Refused or shifted, or no batch (a cluster): each channel on its own.
    PerChannel,
}

impl Batch {
    /// A batch that failed with `e`.
    fn failed(e: fred::error::Error) -> Batch {
        if no_reply(&e) {
            Batch::NoReply(e)
        } else {
            Batch::PerChannel
        }
    }
}

/// Poll `future` once: its outcome if it is ready, `Pending` otherwise (it
/// has then started, and can be awaited to its end).
async fn poll_once<F: Future + ?Sized>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

/// Whether `e` means that no reply came at all (a timeout or a lost
/// connection), as opposed to a reply that was an error.
fn no_reply(e: &fred::error::Error) -> bool {
    use fred::error::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::Timeout | ErrorKind::IO | ErrorKind::Canceled
    )
}

/// `Ok` if `reply` is the answer to `PING <nonce>`: `<nonce>`, or
/// `["pong", <nonce>]` on a RESP2 connection with subscriptions. Any other
/// reply means the connection's replies are shifted (a refused (UN)SUBSCRIBE
/// answered with an error that fred does not account for).
fn echoed(reply: &Value, nonce: &str) -> Result<(), fred::error::Error> {
    let echoed = match reply {
        Value::Array(parts) if parts.len() == 2 => parts[1].as_str(),
        other => other.as_str(),
    };
    if echoed.as_deref() == Some(nonce) {
        return Ok(());
    }
    Err(fred::error::Error::new(
        fred::error::ErrorKind::Unknown,
        "relaylock: the PING behind a (UN)SUBSCRIBE got another command's reply",
    ))
}

impl Registry {
    // The client's parts the registry uses; grouping them would only move
    // the list into a struct built once, in `build`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        subscriber: SubscriberClient,
        redis: Client,
        scripts: &Scripts,
        client_id: String,
        linger: Duration,
        command_timeout: Duration,
        sharded: bool,
        background: TaskTracker,
    ) -> Self {
        Registry {
            map: DashMap::default(),
            wake_all: Notify::new(),
            subscriber,
            redis,
            leave: scripts.leave.clone(),
            sem_leave: scripts.sem_leave.clone(),
            writer_id: Str::from(format!("{client_id}.w")),
            wire_suffix: format!(":{client_id}"),
            client_id: Str::from(client_id),
            linger,
            command_timeout,
            reconnects: AtomicU64::new(0),
            sharded,
            closed: AtomicBool::new(false),
            background,
        }
    }

    /// The channel this client (S)SUBSCRIBEs for the registry's `channel`:
    /// a lock's channel `<value>:ch` carries only the messages a release or
    /// an acquire addresses to one client, on `<value>:ch:<client>`, so a
    /// hand-over costs Redis the same however many clients wait for the key
    /// (docs/design.md, "Protocol 3"). A semaphore's or read-write lock's
    /// channel is shared by all its clients.
    fn wire<'c>(&self, channel: &'c str) -> Cow<'c, str> {
        if Names::kind_of_channel(channel) == Kind::Mutex {
            Cow::Owned(format!("{channel}{}", self.wire_suffix))
        } else {
            Cow::Borrowed(channel)
        }
    }

    /// The registry's channel for a message that came on `wire` (see
    /// [`wire`](Self::wire)).
    fn unwire<'c>(&self, wire: &'c str) -> &'c str {
        wire.strip_suffix(self.wire_suffix.as_str())
            .filter(|c| Names::kind_of_channel(c) == Kind::Mutex && c.ends_with(":ch"))
            .unwrap_or(wire)
    }

    async fn subscribe_channel(&self, channel: &str) -> Result<(), fred::error::Error> {
        let channel = self.wire(channel);
        let channel = channel.as_ref();
        if self.sharded {
            self.with_command_timeout(self.subscriber.ssubscribe(channel))
                .await
        } else {
            self.with_command_timeout(self.subscriber.subscribe(channel))
                .await
        }
    }

    /// PING the subscriber connection, in a cluster each node's, each within
    /// `limit`.
    pub(crate) async fn ping_every_node(&self, limit: Duration) -> Result<(), fred::error::Error> {
        if !self.clustered() {
            return crate::error::with_timeout(limit, self.subscriber.ping::<()>(None)).await;
        }
        for server in self.subscriber.active_connections() {
            let options = Options {
                cluster_node: Some(server),
                ..Default::default()
            };
            let node = self.subscriber.with_options(&options);
            crate::error::with_timeout(limit, node.ping::<()>(None)).await?;
        }
        Ok(())
    }

    /// The slot a (S)SUBSCRIBE of `channel` is routed by: the channel's own
    /// with sharded pub/sub, else the subscriber id's (where fred sends
    /// every SUBSCRIBE in a cluster).
    fn routing_slot(&self, channel: &str) -> u16 {
        if self.sharded {
            redis_keyslot(channel.as_bytes())
        } else {
            redis_keyslot(self.subscriber.id().as_bytes())
        }
    }

    /// The node the subscriber's slot map sends `channel`'s (S)SUBSCRIBE to
    /// now (Redis Cluster; `None` elsewhere).
    fn node_of(&self, channel: &str) -> Option<Server> {
        if !self.clustered() {
            return None;
        }
        let routing = self.subscriber.cached_cluster_state()?;
        routing.get_server(self.routing_slot(channel)).cloned()
    }

    /// Whether any channel was subscribed on a node that, by the
    /// subscriber's slot map now, no longer serves its slot. Compared with
    /// the node recorded when the subscription was confirmed, so it does not
    /// matter who refreshed the map (relaylock, or fred after a MOVED).
    pub(crate) fn any_channel_moved(&self) -> bool {
        // Only confirmed channels: a resubscription that failed leaves its
        // channel unconfirmed (its poller subscribes it again), and an
        // unsubscribed one has nothing to follow.
        self.map
            .iter()
            .filter(|e| e.value().presence.is_confirmed())
            .any(|e| {
                let recorded = e
                    .value()
                    .node
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                recorded.is_some() && recorded != self.node_of(e.key())
            })
    }

    /// Record the node `entry`'s channel was just confirmed on.
    fn record_node(&self, channel: &str, entry: &KeyWaiters) {
        if self.clustered() {
            *entry.node.lock().unwrap_or_else(|p| p.into_inner()) = self.node_of(channel);
        }
    }

    fn clustered(&self) -> bool {
        self.subscriber.is_clustered()
    }

    /// (S)SUBSCRIBE `channel` and PING behind it on the same connection. The
    /// PING answers only after Redis processed the SUBSCRIBE, and carries its
    /// error if it failed: fred resolves SUBSCRIBE itself when it writes it,
    /// so an error reply goes to the next command waiting for a reply. That
    /// must be the PING, so both go in one pipeline ([`Self::with_ping_behind`]).
    /// SSUBSCRIBE gets its own reply from fred (which never pipelines it).
    async fn subscribe_confirmed(&self, channel: &str) -> Result<(), fred::error::Error> {
        if !self.sharded {
            return self.with_ping_behind(channel, true).await;
        }
        let (subscribed, pinged) =
            tokio::join!(self.subscribe_channel(channel), self.ping_behind(channel));
        subscribed.and(pinged)
    }

    /// (S)UNSUBSCRIBE `channel` with a PING behind it, for the same reason
    /// as [`subscribe_confirmed`](Self::subscribe_confirmed): fred resolves
    /// UNSUBSCRIBE when it writes it, so a refusal (an ACL) lands on the
    /// PING; without it a refused UNSUBSCRIBE looked like a success and the
    /// channel stayed subscribed for good.
    async fn unsubscribe_confirmed(&self, channel: &str) -> Result<(), fred::error::Error> {
        self.with_ping_behind(channel, false).await
    }

    /// SUBSCRIBE (`subscribe`) or (S)UNSUBSCRIBE `channel` with a PING
    /// behind it that must come back with its own nonce. fred expects no
    /// reply to those commands, but Redis answers a refusal with an error:
    /// one reply fred does not account for, handed to whatever command
    /// waits first on the connection, or dropped if none waits.
    ///
    /// * Both go in ONE fred pipeline: its router writes them before it
    ///   reads again, so the PING waits before that error can be read.
    ///   Queued separately, even in the same poll (`join!`), the router
    ///   (on another worker thread) sometimes wrote the SUBSCRIBE alone and
    ///   read its refusal before the PING was queued: the refusal was
    ///   dropped, the PING got PONG, and a channel the ACL denies counted as
    ///   confirmed, so none of its waiters polled.
    /// * The PING's own reply, left over after it took a refusal, goes to
    ///   the next command that waits (another key's PING behind its
    ///   SUBSCRIBE): only the PING's own nonce confirms. Any other reply
    ///   means the replies are shifted, and this attempt counts as failed.
    async fn with_ping_behind(
        &self,
        channel: &str,
        subscribe: bool,
    ) -> Result<(), fred::error::Error> {
        let pipeline = Pipeline::from(self.subscriber.clone());
        let wire = self.wire(channel);
        // Queued in the pipeline, nothing sent yet.
        if subscribe {
            pipeline.subscribe(wire.as_ref()).await?;
        } else if self.sharded {
            pipeline.sunsubscribe(wire.as_ref()).await?;
        } else {
            pipeline.unsubscribe(wire.as_ref()).await?;
        }
        let slot = self.clustered().then(|| self.routing_slot(channel));
        self.nonce_ping_last(pipeline, slot).await
    }

    /// The resubscription batch (single server): SUBSCRIBE every channel of
    /// `channels` and one `PING <nonce>` behind them all, queued in one
    /// pipeline, nothing sent yet. Send it with `last()`: `Ok` only if the
    /// PING answers with its own nonce (see [`echoed`]), so no SUBSCRIBE was
    /// refused.
    async fn subscribe_batch<'a>(
        &self,
        channels: impl Iterator<Item = &'a str>,
    ) -> Result<(Pipeline<SubscriberClient>, String), fred::error::Error> {
        let pipeline = Pipeline::from(self.subscriber.clone());
        for channel in channels {
            pipeline.subscribe(self.wire(channel).as_ref()).await?;
        }
        let nonce = queue_nonce_ping(&pipeline, None).await?;
        Ok((pipeline, nonce))
    }

    /// Queue a `PING <nonce>` last in `pipeline` (in a cluster, routed by
    /// `slot`), send it all, and check that the PING answered with its own
    /// nonce (see [`echoed`]).
    async fn nonce_ping_last(
        &self,
        pipeline: Pipeline<SubscriberClient>,
        slot: Option<u16>,
    ) -> Result<(), fred::error::Error> {
        let nonce = queue_nonce_ping(&pipeline, slot).await?;
        let reply = self.with_command_timeout(pipeline.last::<Value>()).await?;
        echoed(&reply, &nonce)
    }

    /// PING behind a (S)SUBSCRIBE of `channel`, on the same connection: in
    /// a cluster, the connection to the node of the channel's slot; without
    /// sharded pub/sub, the node fred sends SUBSCRIBE to, which it picks by
    /// the slot of the client's id.
    async fn ping_behind(&self, channel: &str) -> Result<(), fred::error::Error> {
        if self.clustered() {
            let options = Options {
                cluster_hash: Some(ClusterHash::Custom(self.routing_slot(channel))),
                ..Default::default()
            };
            self.with_command_timeout(self.subscriber.with_options(&options).ping::<()>(None))
                .await
        } else {
            self.with_command_timeout(self.subscriber.ping::<()>(None))
                .await
        }
    }

    /// This client's id in the locks' queues.
    pub(crate) fn client_id(&self) -> &Str {
        &self.client_id
    }

    /// Whether this client uses sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`).
    pub(crate) fn sharded(&self) -> bool {
        self.sharded
    }

    /// This client's id in the queue of a primitive of `kind`: a read-write
    /// lock's writers queue as `<id>.w`, apart from its readers (`<id>`), so
    /// each role keeps its own place and its own wake-ups.
    pub(crate) fn role_id(&self, kind: Kind) -> &Str {
        match kind {
            Kind::Write => &self.writer_id,
            _ => &self.client_id,
        }
    }

    /// Whether any channel is subscribed or being subscribed (entries live
    /// while they have waiters, and for the linger after the last one left).
    pub(crate) fn has_channels(&self) -> bool {
        !self.map.is_empty()
    }

    /// Run a command, bounded by the command timeout whatever the fred
    /// client's own settings.
    async fn with_command_timeout<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T, fred::error::Error> {
        crate::error::with_timeout(self.command_timeout, command).await
    }

    /// Register a task for `channel` (before its first try). It stays
    /// registered until the returned [`Waiter`] is dropped. The flag is true
    /// when other local tasks were already registered: the newcomer should
    /// queue behind them instead of trying first.
    pub(crate) fn join(self: &Arc<Self>, channel: &Str) -> (Waiter, bool) {
        // The channel's name is shared (`Names`): the map's key and the
        // waiter's copy cost no allocation.
        let (entry, before) = {
            let e = self
                .map
                .entry(channel.clone())
                .or_insert_with(|| Arc::new(KeyWaiters::new()));
            let before = e.presence.join();
            (Arc::clone(&e), before)
        };
        let waiter = Waiter {
            registry: Arc::clone(self),
            channel: channel.clone(),
            entry,
            gauge: Gauge::NotCounted,
            queued_try: AtomicBool::new(false),
            need: None,
        };
        (waiter, before)
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
    /// * A semaphore's permits come back silently when a reservation lapses
    ///   unused, so there every reservation, this client's own included,
    ///   arms the grace timer; a local acquisition also counts as news (see
    ///   [`Waiter::note_taken`]), so a busy semaphore arms timers that never
    ///   fire.
    pub(crate) fn on_message(&self, channel: &str, payload: &str) {
        let channel = self.unwire(channel);
        let Some(e) = self.map.get(channel) else {
            return;
        };
        let generation = e.announcements.fetch_add(1, SeqCst) + 1;
        let kind = Names::kind_of_channel(channel);
        let semaphore = kind.counted();
        let me = self.role_id(kind);
        match Announcement::parse(payload) {
            Announcement::Free => e.notify.notify_one(),
            Announcement::ReservedFor(c) if c == &**me => {
                e.notify.notify_one();
                if semaphore {
                    probe_after_grace(e.value(), generation);
                }
            }
            // Our own release woke the waiter that takes it (and armed the
            // timer).
            Announcement::Kept(c) if c == &**me => {}
            // A reservation for another client (also one its own release
            // made) that may lapse unused: probe after the grace.
            Announcement::ReservedFor(_) | Announcement::Kept(_) => {
                probe_after_grace(e.value(), generation);
            }
            Announcement::Taken(lease) => e.observe(Instant::now(), lease, false),
        }
    }

    /// A release of this client reserved semaphore permits for this client,
    /// or handed a lock to another client with this one its stand-by (no
    /// message tells it): arm the grace timer, as a message would.
    pub(crate) fn reserved_here(&self, channel: &str) {
        if let Some(e) = self.map.get(channel) {
            let generation = e.announcements.fetch_add(1, SeqCst) + 1;
            probe_after_grace(e.value(), generation);
        }
    }

    /// Claim the oldest local waiter of `channel` that a release may hand
    /// the lock to directly (see [`crate::state::handoff`]), and say whether other
    /// local tasks are registered for it too (read in the same lookup).
    pub(crate) fn claim(&self, channel: &str) -> Option<(Claim<Notify>, bool)> {
        let entry = self.map.get(channel)?;
        let claim = Inbox::claim(&entry.inbox)?;
        Some((claim, entry.presence.count() > 1))
    }

    /// Claim up to `max` open offers of `channel`'s local waiters (a
    /// read-write lock's readers that one reader's acquire takes permits
    /// for, see `crate::state::handoff`).
    pub(crate) fn claim_many(&self, channel: &str, max: usize) -> Vec<Claim<Notify>> {
        let Some(entry) = self.map.get(channel) else {
            return Vec::new();
        };
        let mut claims = Vec::new();
        while claims.len() < max {
            match Inbox::claim(&entry.inbox) {
                Some(c) => claims.push(c),
                None => break,
            }
        }
        claims
    }

    /// Wake up to `n` local waiters of `channel`, no more than are
    /// registered (one lookup; a semaphore's release may free many permits).
    pub(crate) fn wake_up_to(&self, channel: &str, n: usize) {
        if let Some(e) = self.map.get(channel) {
            for _ in 0..n.min(e.presence.count()) {
                e.notify.notify_one();
            }
        }
    }

    /// Wake one local waiter of `channel` if any waits (a permit for nobody
    /// would cost the next newcomer a try).
    pub(crate) fn wake_one_if_waiting(&self, channel: &str) {
        if let Some(e) = self.map.get(channel) {
            e.wake_one_if_waiting();
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
    /// registry holds subscribed, confirmed by a nonce PING (one behind all
    /// of them on a single server, else one each), then wake every waiter.
    ///
    /// Entries stay unconfirmed until their PING came back, and are confirmed
    /// again only under their mutex, only if still subscribed, and only if
    /// no other SUBSCRIBE or UNSUBSCRIBE of the channel came after this one
    /// (a cleanup, then a waiter's own SUBSCRIBE that may have failed), so
    /// neither is ever overridden. If anything fails, they stay unconfirmed:
    /// their waiters subscribe again themselves, polling meanwhile.
    pub(crate) async fn resubscribe_all(&self) {
        // A confirmation in flight may have gone to the old connection.
        self.reconnects.fetch_add(1, SeqCst);
        let entries: Vec<(Str, Arc<KeyWaiters>)> = self
            .map
            .iter()
            .map(|r| (r.key().clone(), Arc::clone(r.value())))
            .collect();
        // Every channel is unconfirmed from here on: also those after a
        // failure below, whose subscription may be gone too.
        for (_, entry) in &entries {
            if *entry.subscribed.lock().await {
                entry.presence.set_confirmed(false);
            }
        }
        let connection = self.connection();
        // Every subscribed entry, its mutex held while its SUBSCRIBE is
        // handed to fred, so that it is ordered before any UNSUBSCRIBE a
        // cleanup sends afterwards.
        let mut held = Vec::new();
        for (channel, entry) in &entries {
            let sub = entry.subscribed.lock().await;
            if *sub {
                held.push((&**channel, entry, sub));
            }
        }
        // With the count of SUBSCRIBEs and UNSUBSCRIBEs seen under the lock:
        // if another one came after this one (a cleanup, then a waiter's
        // own SUBSCRIBE, while the batch's reply was awaited), this
        // resubscription's outcome says nothing of the channel's state.
        let channels: Vec<(&str, &Arc<KeyWaiters>, u64)> = held
            .iter()
            .map(|&(channel, entry, _)| (channel, entry, entry.subscription_changes.load(SeqCst)))
            .collect();
        // On a single server, all SUBSCRIBEs and one nonce PING in ONE
        // pipeline: one round trip, and a refusal (an ACL) cannot be dropped
        // unseen, since the PING waits for a reply when it arrives (a plain
        // PING sent after the SUBSCRIBEs could get PONG after a refusal had
        // been dropped, and count a denied channel confirmed: found in
        // review). The entries' locks are let go once the pipeline is with
        // fred, before its reply: on a silent connection the reply takes a
        // command timeout, and every new waiter of these keys would wait for
        // it in `ensure_subscribed` (a deaf subscriber's client made 24
        // acquisitions in 6 s against the other client's 759 while the locks
        // were held to the reply: tests/faults.rs,
        // `a_blackholed_subscriber_only_delays_waiters`).
        //
        // If the batch is refused or its replies are shifted, or in a
        // cluster, each channel is confirmed by its own nonce PING (in a
        // cluster on its own node), as a waiter subscribes: under its lock,
        // if still subscribed; a failure skips that channel only (its
        // waiters subscribe again themselves, polling meanwhile). If the
        // batch got no reply at all (timeout, closed connection), every
        // channel failed: one attempt per channel on the same silent
        // connection would cost a command timeout per channel, one after
        // another.
        let batch = if self.clustered() || held.is_empty() {
            drop(held);
            Batch::PerChannel
        } else {
            match self
                .subscribe_batch(channels.iter().map(|&(channel, ..)| channel))
                .await
            {
                Err(e) => {
                    drop(held);
                    Batch::failed(e)
                }
                Ok((pipeline, nonce)) => {
                    let reply = self.with_command_timeout(pipeline.last::<Value>());
                    let mut reply = std::pin::pin!(reply);
                    // The first poll hands the pipeline to fred's router:
                    // fred sends it before it awaits anything.
                    let first = poll_once(reply.as_mut()).await;
                    drop(held);
                    let reply = match first {
                        Poll::Ready(reply) => reply,
                        Poll::Pending => reply.await,
                    };
                    match reply.and_then(|reply| echoed(&reply, &nonce)) {
                        Ok(()) => Batch::Confirmed,
                        Err(e) => Batch::failed(e),
                    }
                }
            }
        };
        let mut resubscribed = Vec::new();
        for &(channel, entry, mut changes) in &channels {
            let outcome = match &batch {
                Batch::Confirmed => Ok(()),
                Batch::NoReply(e) => Err(e.clone()),
                Batch::PerChannel => {
                    let sub = entry.subscribed.lock().await;
                    if !*sub || entry.presence.is_confirmed() {
                        // Cleaned up, or confirmed by a waiter, meanwhile.
                        continue;
                    }
                    changes = entry.subscription_changes.load(SeqCst);
                    self.subscribe_confirmed(channel).await
                }
            };
            match outcome {
                Ok(()) => {
                    self.record_node(channel, entry);
                    resubscribed.push((Arc::clone(entry), changes));
                }
                Err(e) => {
                    // Not over a waiter's confirmation made meanwhile.
                    if !entry.presence.is_confirmed() {
                        entry.estimate().failed_at = Some(Instant::now());
                    }
                    tracing::warn!(error = %e, %channel,
                        "relaylock: resubscribe failed; its waiters subscribe again themselves");
                }
            }
        }
        if !resubscribed.is_empty() {
            match self.same_connection(&connection) {
                Ok(()) => {
                    for (entry, changes) in &resubscribed {
                        let sub = entry.subscribed.lock().await;
                        if *sub && entry.subscription_changes.load(SeqCst) == *changes {
                            entry.presence.set_confirmed(true);
                            entry.estimate().failed_at = None;
                        }
                    }
                }
                Err(e) => {
                    // Unconfirmed, and recorded as failed: the keys' pollers
                    // subscribe again, and their success wakes the sleepers.
                    for (entry, _) in &resubscribed {
                        entry.estimate().failed_at = Some(Instant::now());
                    }
                    tracing::warn!(error = %e, "relaylock: could not confirm resubscription");
                }
            }
        }
        tracing::debug!(
            channels = resubscribed.len(),
            "relaylock: resubscribed after reconnect"
        );
        self.wake_all();
    }

    /// The client is going away: clean-up tasks stop retrying.
    pub(crate) fn close(&self) {
        self.closed.store(true, SeqCst);
    }

    /// A release script of this client is about to be sent for `channel`.
    /// When local tasks still wait for the key, returns a [`Requeue`]: the
    /// script should queue this client again, and the returned value must
    /// live until the script's outcome is known (or abandoned). `None`: no
    /// local waiter, do not queue again.
    ///
    /// While a requeue is in flight, the last local waiter to leave does not
    /// take the client out of the queue (its `LEAVE` could run before the
    /// release script, which queues it again, leaving a client queued with
    /// nobody waiting); the
    /// [`Requeue`] does it when dropped if nobody waits by then.
    pub(crate) fn requeue(self: &Arc<Self>, channel: &str) -> Option<Requeue> {
        let entry = Arc::clone(self.map.get(channel)?.value());
        if !entry.presence.begin_requeue() {
            // The last waiter may have left between the two lines above and
            // seen our count: the queue clean-up is ours then.
            self.leave_queue_if_idle(channel, &entry);
            return None;
        }
        Some(Requeue {
            registry: Arc::clone(self),
            channel: channel.to_owned(),
            entry,
        })
    }

    /// Take this client out of the lock's queue if a try or a release
    /// queued it and no local task waits any more. Runs in the background.
    fn leave_queue_if_idle(self: &Arc<Self>, channel: &str, entry: &Arc<KeyWaiters>) {
        // Dekker with `Waiter::drop` and `Requeue::drop`: each lowers its
        // counter, then reads the other's (SeqCst), so the last of them to
        // finish sees both at zero.
        if !entry.presence.take_queue_leave() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let registry = Arc::clone(self);
        let entry = Arc::clone(entry);
        let names = Names::of_channel(channel);
        let semaphore = names.kind.counted();
        let background = self.background.clone();
        background.spawn_on(async move {
            // A read-write lock's leave names both of its channels.
            let (channel, wchannel) = names.script_channels();
            let (holds, facts) = names.side();
            let (lock, voids) = (&*names.lock, names.voids());
            let role = registry.role_id(names.kind);
            let leave = evalsha_reloading::<i64, _, _>(
                &registry.redis,
                if semaphore {
                    &registry.sem_leave
                } else {
                    &registry.leave
                },
                || {
                    let client = Value::String(role.clone());
                    let publish = if registry.sharded { "SPUBLISH" } else { "PUBLISH" };
                    // Read as the command is made: with no local waiter
                    // now, none of this client's tries can run between
                    // this LEAVE and Redis on this connection, so a live
                    // reservation for the client is nobody's and is freed
                    // at once (else left to the waiter or to lapse).
                    let free = if entry.presence.count() == 0 { "1" } else { "0" };
                    if !semaphore {
                        // It may pass on a hand-over reservation.
                        return (
                            vec![lock],
                            vec![
                                client,
                                channel.as_str().into(),
                                publish.into(),
                                free.into(),
                            ],
                        );
                    }
                    // A semaphore's leave walks the queue and may tell the
                    // clients it reserves for.
                    (
                        vec![lock, &holds, &facts, &voids, &voids],
                        vec![
                            client,
                            channel.as_str().into(),
                            publish.into(),
                            (HANDOFF_GRACE_MS as i64).into(),
                            wchannel.as_str().into(),
                            free.into(),
                        ],
                    )
                },
            );
            if let Err(e) = registry.with_command_timeout(leave).await {
                tracing::debug!(error = %e, "relaylock: could not leave the queue; the next hand-over skips this client");
            }
            // A waiter that arrived meanwhile may have queued before the LEAVE
            // ran and been taken out with it: wake one to try (and queue) again.
            entry.wake_one_if_waiting();
        }, &handle);
    }

    /// Keep `entry`'s subscription for the linger after its last waiter
    /// left, then unsubscribe and remove the entry, unless a waiter came
    /// back. At most ONE such task runs per entry: a later departure only
    /// moves the deadline (`linger_until`), so memory grows with the number
    /// of keys, not with the rate of departures.
    ///
    /// The race with a newcomer is closed by two rules:
    /// 1. `confirmed` is cleared BEFORE `count` is read (both SeqCst), and a
    ///    newcomer raises `count` BEFORE it reads `confirmed`. So either the
    ///    newcomer sees `confirmed == false` and goes through the mutex (where
    ///    it waits for this task and subscribes again if it unsubscribed),
    ///    or this task sees `count > 0` and keeps the subscription.
    /// 2. The entry leaves the map only after the UNSUBSCRIBE was answered,
    ///    and only if still unused (checked under the map's shard lock, where
    ///    `join` raises `count`). A newcomer after the removal makes a new
    ///    entry whose SUBSCRIBE is sent after that UNSUBSCRIBE on the same
    ///    connection.
    ///
    /// An UNSUBSCRIBE that failed or timed out may or may not have reached
    /// Redis: the channel then counts as subscribed still, and the task tries
    /// again after [`UNSUBSCRIBE_RETRY`] until it succeeds, a waiter comes
    /// back, or the client is dropped.
    async fn linger_then_unsubscribe(self: Arc<Self>, channel: String, entry: Arc<KeyWaiters>) {
        loop {
            if self.closed.load(SeqCst) {
                return;
            }
            let until = {
                let mut until = entry.linger_until();
                // Read under the deadline's lock: a waiter that leaves after
                // this read finds `None` and starts a new task.
                if entry.presence.count() > 0 {
                    *until = None;
                    return;
                }
                until.unwrap_or_else(Instant::now)
            };
            if until > Instant::now() {
                tokio::time::sleep_until(until.into()).await;
                continue;
            }
            let mut sub = entry.subscribed.lock().await;
            if !entry.presence.unconfirm_if_idle() {
                continue;
            }
            if *sub {
                if let Err(e) = self.unsubscribe_confirmed(channel.as_str()).await {
                    tracing::debug!(error = %e, %channel,
                        "relaylock: unsubscribe failed; trying again");
                    drop(sub);
                    *entry.linger_until() = Some(after(UNSUBSCRIBE_RETRY));
                    continue;
                }
                *sub = false;
                entry.subscription_changes.fetch_add(1, SeqCst);
            }
            let removed = self
                .map
                .remove_if(&*channel, |_, e| {
                    Arc::ptr_eq(e, &entry) && e.presence.is_unused()
                })
                .is_some();
            if removed {
                return;
            }
            // A waiter joined meanwhile (it subscribes again under the mutex
            // once this guard is gone; the loop ends at its `count` check),
            // or a release that may queue this client is still in flight:
            // look again a little later, not at once (found in review: the
            // loop spun a core while a slow release was in flight).
            drop(sub);
            if entry.presence.count() == 0 {
                *entry.linger_until() = Some(after(REMOVE_RETRY));
            }
        }
    }

    /// The last local waiter of `entry` left: leave the queue at once, and
    /// end the subscription after the linger.
    fn last_waiter_left(self: &Arc<Self>, channel: &str, entry: &Arc<KeyWaiters>) {
        self.leave_queue_if_idle(channel, entry);
        let start = {
            let mut until = entry.linger_until();
            let first = until.is_none();
            *until = Some(after(self.linger));
            first
        };
        if !start {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(
                    Arc::clone(self).linger_then_unsubscribe(channel.to_owned(), Arc::clone(entry)),
                );
            }
            Err(_) => {
                *entry.linger_until() = None;
                tracing::debug!(
                    "relaylock: no runtime to unsubscribe on; the subscription ends with the client"
                );
            }
        }
    }
}

/// Wake one local waiter of `entry` when the hand-over grace has passed,
/// unless anything was announced (or, for a semaphore, taken locally) since
/// `generation`: a reservation nobody took has lapsed by then, and the
/// waiter's try hands its permits on.
fn probe_after_grace(entry: &Arc<KeyWaiters>, generation: u64) {
    let entry = Arc::clone(entry);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS + 1)).await;
        if entry.announcements.load(SeqCst) == generation {
            entry.notify.notify_one();
        }
    });
}

/// How long the clean-up waits before it tries again to remove an entry
/// that a requeueing release still needs.
const REMOVE_RETRY: Duration = Duration::from_millis(100);

/// How long after a failed UNSUBSCRIBE the clean-up tries again.
const UNSUBSCRIBE_RETRY: Duration = Duration::from_secs(1);

/// A release script in flight that may queue this client again (see
/// [`Registry::requeue`]). Dropping it marks the client queued, and takes
/// it out of the queue again when no local task waits any more.
#[derive(Debug)]
pub(crate) struct Requeue {
    registry: Arc<Registry>,
    channel: String,
    entry: Arc<KeyWaiters>,
}

impl Requeue {
    /// The largest number of permits a local waiter of this semaphore
    /// needs now, with its limit (`None` before any waiter said: the
    /// release then does not queue the client again, and that waiter's own
    /// try does).
    pub(crate) fn need(&self) -> Option<(u32, u32)> {
        self.entry.want(Names::kind_of_channel(&self.channel))
    }
}

impl Drop for Requeue {
    fn drop(&mut self) {
        self.entry.presence.end_requeue();
        self.registry
            .leave_queue_if_idle(&self.channel, &self.entry);
    }
}

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

    /// Hand a wake-up on to the next local waiter (used when a woken waiter
    /// gives up before using it).
    /// Whether other local tasks are registered for this key.
    pub(crate) fn has_company(&self) -> bool {
        self.entry.presence.count() > 1
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll};

    /// A registry on fred clients that never connect: the in-process paths
    /// (join, wake-ups, hand-ons, the grace timer, the polling role) do no
    /// I/O, so they run here without Redis, on tokio's paused clock.
    fn offline_registry() -> Arc<Registry> {
        let builder = fred::types::Builder::default_centralized();
        Arc::new(Registry::new(
            builder.build_subscriber_client().unwrap(),
            builder.build().unwrap(),
            &crate::scripts::Scripts::new(),
            "me".into(),
            Duration::from_millis(50),
            Duration::from_secs(1),
            false,
            TaskTracker::new(),
        ))
    }

    fn ready<F: Future>(f: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        matches!(f.poll(&mut Context::from_waker(waker)), Poll::Ready(_))
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_wakes_one_waiter_in_order_and_a_dropped_wakeup_is_passed_on() {
        let r = offline_registry();
        let (a, queued_a) = r.join(&Str::from("ch"));
        let (b, queued_b) = r.join(&Str::from("ch"));
        let (c, _) = r.join(&Str::from("ch"));
        assert!(!queued_a && queued_b);
        let mut na = pin!(a.notified());
        let mut nb = Box::pin(b.notified());
        let mut nc = pin!(c.notified());
        assert!(!ready(na.as_mut()) && !ready(nb.as_mut()) && !ready(nc.as_mut()));
        r.on_message("ch", "r:");
        // One release, one wake-up: the first to wait.
        assert!(ready(na.as_mut()));
        assert!(!ready(nb.as_mut()) && !ready(nc.as_mut()));
        // A release reserved for this client wakes one too; if the woken
        // waiter is cancelled before it runs, the wake-up passes on.
        r.on_message("ch", "r:me");
        drop(nb);
        assert!(ready(nc.as_mut()));
        // A waiter leaving during its try hands the re-check on: with nobody
        // waiting, the permit is kept for the next one to wait.
        a.pass_on();
        assert!(ready(pin!(b.notified())));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_for_another_client_wakes_one_waiter_after_the_grace_unless_taken() {
        let r = offline_registry();
        let (a, _) = r.join(&Str::from("ch"));
        let mut na = pin!(a.notified());
        assert!(!ready(na.as_mut()));
        // Reserved for another client, which takes it (`t:`) in time.
        r.on_message("ch", "r:other");
        tokio::time::sleep(Duration::from_millis(10)).await;
        r.on_message("ch", "t:1000");
        tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS * 2)).await;
        assert!(
            !ready(na.as_mut()),
            "woken although the reservation was taken"
        );
        // Reserved for another client that never comes: after the grace,
        // one waiter probes.
        r.on_message("ch", "r:other");
        tokio::time::sleep(Duration::from_millis(HANDOFF_GRACE_MS - 5)).await;
        assert!(!ready(na.as_mut()));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(ready(na.as_mut()), "nobody probed the lapsed reservation");
    }

    #[tokio::test(start_paused = true)]
    async fn the_polling_role_is_held_once_and_handed_on() {
        let r = offline_registry();
        let (a, _) = r.join(&Str::from("ch"));
        let (b, _) = r.join(&Str::from("ch"));
        let role = a.take_poller_role().expect("free");
        assert!(b.take_poller_role().is_none());
        let mut freed = pin!(b.poller_freed());
        assert!(!ready(freed.as_mut()));
        drop(role);
        assert!(ready(freed.as_mut()), "the role's release woke nobody");
        assert!(b.take_poller_role().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_current_lease_wakes_sleepers_once() {
        let r = offline_registry();
        let (a, _) = r.join(&Str::from("ch"));
        // Observations in the past, so the message below is the newest.
        let t0 = Instant::now() - Duration::from_millis(5);
        a.note_pttl(t0, Duration::from_secs(10));
        let mut moved = pin!(a.estimate_moved());
        assert!(!ready(moved.as_mut()));
        // The same lease seen again (jitter): nobody is woken.
        a.note_pttl(t0 + Duration::from_micros(300), Duration::from_secs(10));
        assert!(!ready(moved.as_mut()));
        // Another client took over with a 1 s lease.
        r.on_message("ch", "t:1000");
        assert!(ready(moved.as_mut()));
        assert!(a.until_due().unwrap() <= Duration::from_millis(1001));
    }

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
        assert_eq!(Announcement::parse("o:abc"), Announcement::Kept("abc"));
        assert_eq!(Announcement::parse("o:"), Announcement::Free);
        assert_eq!(Announcement::parse("t:x"), Announcement::Free);
        assert_eq!(Announcement::parse("1795238504002345"), Announcement::Free);
        assert_eq!(Announcement::parse(""), Announcement::Free);
    }
}
