//! The subscription protocol of the registry's channels: which channel a
//! key's waiters listen on (`wire`), (S)SUBSCRIBE and (S)UNSUBSCRIBE each
//! confirmed by a `PING <nonce>` behind it on the same connection, the
//! resubscription of every channel after a reconnect, and the linger that
//! ends a channel's subscription after its last waiter left.
//!
//! # Invariants
//!
//! * Every SUBSCRIBE and UNSUBSCRIBE of a channel is sent under its entry's
//!   `subscribed` mutex, so they reach Redis in the order the registry
//!   decided them; `subscription_changes` counts them, so a confirmation
//!   applies only if no other one came after it.
//! * A channel counts as confirmed only after a PING sent behind its
//!   SUBSCRIBE came back with its own nonce, on the connection the
//!   SUBSCRIBE went to.

use std::borrow::Cow;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use fred::clients::{Pipeline, SubscriberClient};
use fred::interfaces::{ClientInterface, ClientLike, ClusterInterface, PubsubInterface};
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, Value};
use fred::util::redis_keyslot;

use super::{after, KeyWaiters, Registry};
use crate::scripts::{Kind, Names};

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

/// One channel a resubscription is for: its name, its entry, and the count
/// of its SUBSCRIBEs and UNSUBSCRIBEs seen under its lock.
type Resubscribing<'a> = (&'a str, &'a Arc<KeyWaiters>, u64);

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
    pub(super) fn failed(e: fred::error::Error) -> Batch {
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

/// How long the clean-up waits before it tries again to remove an entry
/// that a requeueing release still needs.
pub(super) const REMOVE_RETRY: Duration = Duration::from_millis(100);

/// How long after a failed UNSUBSCRIBE the clean-up tries again.
pub(super) const UNSUBSCRIBE_RETRY: Duration = Duration::from_secs(1);

impl Registry {
    /// The channel this client (S)SUBSCRIBEs for the registry's `channel`:
    /// a lock's channel `<value>:ch` carries only the messages a release or
    /// an acquire addresses to one client, on `<value>:ch:<client>`, so a
    /// hand-over costs Redis the same however many clients wait for the key
    /// (docs/design.md, "Protocol 3"). A semaphore's or read-write lock's
    /// channel is shared by all its clients.
    pub(super) fn wire<'c>(&self, channel: &'c str) -> Cow<'c, str> {
        if Names::kind_of_channel(channel) == Kind::Mutex {
            Cow::Owned(format!("{channel}{}", self.wire_suffix))
        } else {
            Cow::Borrowed(channel)
        }
    }

    /// The registry's channel for a message that came on `wire` (see
    /// [`wire`](Self::wire)).
    pub(super) fn unwire<'c>(&self, wire: &'c str) -> &'c str {
        wire.strip_suffix(self.wire_suffix.as_str())
            .filter(|c| Names::kind_of_channel(c) == Kind::Mutex && c.ends_with(":ch"))
            .unwrap_or(wire)
    }

    pub(super) async fn subscribe_channel(&self, channel: &str) -> Result<(), fred::error::Error> {
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
    pub(super) fn routing_slot(&self, channel: &str) -> u16 {
        if self.sharded {
            redis_keyslot(channel.as_bytes())
        } else {
            redis_keyslot(self.subscriber.id().as_bytes())
        }
    }

    /// The node the subscriber's slot map sends `channel`'s (S)SUBSCRIBE to
    /// now (Redis Cluster; `None` elsewhere).
    pub(super) fn node_of(&self, channel: &str) -> Option<Server> {
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
    pub(super) fn record_node(&self, channel: &str, entry: &KeyWaiters) {
        if self.clustered() {
            *entry.node.lock().unwrap_or_else(|p| p.into_inner()) = self.node_of(channel);
        }
    }

    pub(super) fn clustered(&self) -> bool {
        self.subscriber.is_clustered()
    }

    /// (S)SUBSCRIBE `channel` and PING behind it on the same connection. The
    /// PING answers only after Redis processed the SUBSCRIBE, and carries its
    /// error if it failed: fred resolves SUBSCRIBE itself when it writes it,
    /// so an error reply goes to the next command waiting for a reply. That
    /// must be the PING, so both go in one pipeline ([`Self::with_ping_behind`]).
    /// SSUBSCRIBE gets its own reply from fred (which never pipelines it).
    pub(super) async fn subscribe_confirmed(
        &self,
        channel: &str,
    ) -> Result<(), fred::error::Error> {
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
    pub(super) async fn unsubscribe_confirmed(
        &self,
        channel: &str,
    ) -> Result<(), fred::error::Error> {
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
    pub(super) async fn with_ping_behind(
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
    pub(super) async fn subscribe_batch<'a>(
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
    pub(super) async fn nonce_ping_last(
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
    pub(super) async fn ping_behind(&self, channel: &str) -> Result<(), fred::error::Error> {
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

    /// Run a command, bounded by the command timeout whatever the fred
    /// client's own settings.
    pub(super) async fn with_command_timeout<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T, fred::error::Error> {
        crate::error::with_timeout(self.command_timeout, command).await
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
    pub(super) fn same_connection(&self, before: &Connection) -> Result<(), fred::error::Error> {
        if *before == self.connection() {
            return Ok(());
        }
        Err(fred::error::Error::new(
            fred::error::ErrorKind::IO,
            "relaylock: the subscriber connection changed while subscribing",
        ))
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
        let channels: Vec<Resubscribing<'_>> = held
            .iter()
            .map(|&(channel, entry, _)| (channel, entry, entry.subscription_changes.load(SeqCst)))
            .collect();
        let batch = self.resubscribe_batch(held, &channels).await;
        let resubscribed = self.confirm_each(&channels, &batch).await;
        self.confirm_resubscribed(&resubscribed, &connection).await;
        tracing::debug!(
            channels = resubscribed.len(),
            "relaylock: resubscribed after reconnect"
        );
        self.wake_all();
    }

    /// Resubscribe `held`'s channels in one batch, where that is possible,
    /// letting go of each entry's lock once the batch is with fred.
    ///
    /// On a single server, all SUBSCRIBEs and one nonce PING in ONE
    /// pipeline: one round trip, and a refusal (an ACL) cannot be dropped
    /// unseen, since the PING waits for a reply when it arrives (a plain
    /// PING sent after the SUBSCRIBEs could get PONG after a refusal had
    /// been dropped, and count a denied channel confirmed). The entries'
    /// locks are let go once the pipeline is with fred, before its reply:
    /// on a silent connection the reply takes a command timeout, and every
    /// new waiter of these keys would wait for it in `ensure_subscribed`.
    ///
    /// If the batch is refused or its replies are shifted, or in a
    /// cluster, each channel is confirmed by its own nonce PING (in a
    /// cluster on its own node), as a waiter subscribes: under its lock,
    /// if still subscribed; a failure skips that channel only (its
    /// waiters subscribe again themselves, polling meanwhile). If the
    /// batch got no reply at all (timeout, closed connection), every
    /// channel failed: one attempt per channel on the same silent
    /// connection would cost a command timeout per channel, one after
    /// another.
    async fn resubscribe_batch(
        &self,
        held: Vec<(&str, &Arc<KeyWaiters>, tokio::sync::MutexGuard<'_, bool>)>,
        channels: &[Resubscribing<'_>],
    ) -> Batch {
        if self.clustered() || held.is_empty() {
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
        }
    }

    /// Each channel's outcome of the resubscription: the batch's, or (for
    /// [`Batch::PerChannel`]) its own confirmed SUBSCRIBE, under its lock,
    /// if still subscribed. Returns the entries resubscribed, with the
    /// count of SUBSCRIBEs and UNSUBSCRIBEs their outcome belongs to.
    async fn confirm_each(
        &self,
        channels: &[Resubscribing<'_>],
        batch: &Batch,
    ) -> Vec<(Arc<KeyWaiters>, u64)> {
        let mut resubscribed = Vec::new();
        for &(channel, entry, mut changes) in channels {
            let outcome = match batch {
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
        resubscribed
    }

    /// Confirm the resubscribed entries, if the connection is still the one
    /// they were resubscribed on (else record them failed: their pollers
    /// subscribe again, and their success wakes the sleepers).
    async fn confirm_resubscribed(
        &self,
        resubscribed: &[(Arc<KeyWaiters>, u64)],
        connection: &Connection,
    ) {
        if !resubscribed.is_empty() {
            match self.same_connection(connection) {
                Ok(()) => {
                    for (entry, changes) in resubscribed {
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
                    for (entry, _) in resubscribed {
                        entry.estimate().failed_at = Some(Instant::now());
                    }
                    tracing::warn!(error = %e, "relaylock: could not confirm resubscription");
                }
            }
        }
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
    pub(super) async fn linger_then_unsubscribe(
        self: Arc<Self>,
        channel: String,
        entry: Arc<KeyWaiters>,
    ) {
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
            // look again a little later, not at once, so a slow release in
            // flight does not make this loop spin.
            drop(sub);
            if entry.presence.count() == 0 {
                *entry.linger_until() = Some(after(REMOVE_RETRY));
            }
        }
    }
}
