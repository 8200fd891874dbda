//! The one shared subscriber task of a client.
//!
//! It reads fred's message stream and turns every release message into ONE
//! local wake-up ([`Registry::on_message`]). Pub/sub is at-most-once, so two
//! events make it wake EVERY waiter to re-check instead:
//!
//! * a reconnect of the subscriber connection: messages published while it was
//!   down are gone. The task first subscribes again every channel the registry
//!   holds (confirmed with a PING), then wakes everyone, so a waiter that
//!   re-checks is already covered by the new subscription.
//! * a lagged message stream (`RecvError::Lagged`): fred's broadcast buffer
//!   overflowed and messages were dropped.
//!
//! A subscriber connection that went silent without closing (a half-open TCP
//! connection behind a NAT or firewall, a blackholed network) delivers no
//! message and no error: nothing is pending on it, so fred never notices.
//! While any channel is subscribed, the task therefore PINGs the connection
//! every half command timeout (at least 100 ms, at most 5 s); a PING
//! unanswered within the command timeout forces a reconnect, which
//! resubscribes and wakes everyone. A silent connection is so detected within
//! 1.5 command timeouts.
//!
//! fred's own `manage_subscriptions()` is deliberately not used: it resubscribes
//! from fred's channel set concurrently with this task, so the wake-up could
//! reach waiters before their channel is subscribed again, and its SUBSCRIBE
//! could overtake the registry's UNSUBSCRIBE of a channel nobody waits on.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface, PubsubInterface};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::calls::OBSERVED_SUFFIX;
use crate::observers::Observers;
use crate::registry::Registry;

/// Spawn the subscriber task, run again should it panic (see
/// `crate::supervise`). It ends when the subscriber client quits (its
/// streams close) or when the handle is aborted.
pub(crate) fn spawn(
    subscriber: &SubscriberClient,
    commands: &Client,
    registry: Arc<Registry>,
    control: Control,
    command_timeout: Duration,
) -> JoinHandle<()> {
    let (subscriber, commands) = (subscriber.clone(), commands.clone());
    crate::supervise::supervise("subscriber", move |panics| {
        run(
            &subscriber,
            &commands,
            Arc::clone(&registry),
            control.clone(),
            command_timeout,
            panics > 0,
        )
    })
}

/// The client's control channel (`crate::identity`) and what to do with
/// its messages. Subscribed outside the registry: no waiter depends on it,
/// so a plain (S)SUBSCRIBE, repeated after every reconnect, is enough; a
/// message it misses costs only the old bound (the next renewal).
#[derive(Clone)]
pub(crate) struct Control {
    pub(crate) channel: String,
    pub(crate) sharded: bool,
    pub(crate) on_message: Arc<dyn Fn(&str) + Send + Sync>,
    /// The observed elections' channels, subscribed the same way.
    pub(crate) observers: Arc<Observers>,
}

impl Control {
    /// (S)SUBSCRIBE the channel, within `limit`; a failure (an ACL without
    /// the channel) is logged at debug level.
    pub(crate) async fn subscribe(&self, subscriber: &SubscriberClient, limit: Duration) {
        let channel = self.channel.as_str();
        if let Err(e) = observe_channel(subscriber, self.sharded, channel, limit).await {
            tracing::debug!(error = %crate::error::readable(&e), %channel,
                "relaylock: could not subscribe the control channel; an operator's unlock is noticed at the next renewal");
        }
    }

    /// (S)SUBSCRIBE every observed election's channel, within `limit`
    /// each, and wake their watchers (a change may have been missed).
    async fn subscribe_observed(&self, subscriber: &SubscriberClient, limit: Duration) {
        for channel in self.observers.channels() {
            let _ = observe_channel(subscriber, self.sharded, &channel, limit).await;
        }
        self.observers.wake_all();
    }

    /// A message that came on `channel`: the control channel's, an
    /// observed election's, or else the registry's.
    fn or_registry(&self, registry: &Registry, channel: &str, payload: &str) {
        if channel == self.channel {
            (self.on_message)(payload);
        } else if !(channel.ends_with(OBSERVED_SUFFIX) && self.observers.on_message(channel)) {
            registry.on_message(channel, payload);
        }
    }
}

/// (S)SUBSCRIBE a channel outside the registry (an observed election's,
/// the control channel), within `limit`.
pub(crate) async fn observe_channel(
    subscriber: &SubscriberClient,
    sharded: bool,
    channel: &str,
    limit: Duration,
) -> Result<(), fred::error::Error> {
    if sharded {
        crate::error::with_timeout(limit, subscriber.ssubscribe(channel)).await
    } else {
        crate::error::with_timeout(limit, subscriber.subscribe(channel)).await
    }
}

/// (S)UNSUBSCRIBE an election's channel nobody observes any more.
pub(crate) async fn unobserve_channel(
    subscriber: &SubscriberClient,
    sharded: bool,
    channel: &str,
    limit: Duration,
) -> Result<(), fred::error::Error> {
    if sharded {
        crate::error::with_timeout(limit, subscriber.sunsubscribe(channel)).await
    } else {
        crate::error::with_timeout(limit, subscriber.unsubscribe(channel)).await
    }
}

impl Control {}

/// One run of the subscriber task. Its streams are taken before it returns
/// the future, so nothing published after that is missed. A run after a
/// panic (`restarted`) may have missed messages: it subscribes every
/// channel again and wakes every waiter first, as after a reconnect.
fn run(
    subscriber: &SubscriberClient,
    commands: &Client,
    registry: Arc<Registry>,
    control: Control,
    command_timeout: Duration,
    restarted: bool,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let every = (command_timeout / 2).clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    // Redis Cluster: the command client learns of moved slots from MOVED
    // replies to its script calls; the heartbeat re-reads the slot map too,
    // for a waiting client that sends no commands. (The subscriber's own
    // change events are not used: fred announces one on every sync, also
    // on ours, which would loop.) A reconnect of the subscriber itself comes
    // through `reconnects`.
    let mut command_changes = commands.cluster_change_rx();
    let mut cluster_events = subscriber.is_clustered();
    let subscriber = subscriber.clone();
    async move {
        if restarted {
            resubscribe(&subscriber, &registry, &control, command_timeout).await;
        }
        let mut beats = tokio::time::interval(every);
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut probe: Option<JoinHandle<()>> = None;
        loop {
            tokio::select! {
                biased;
                event = reconnects.recv() => match event {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        if let Ok(server) = &event {
                            tracing::info!(%server, "relaylock: subscriber reconnected; resubscribing and waking every waiter");
                        }
                        resubscribe(&subscriber, &registry, &control, command_timeout).await;
                    }
                    Err(RecvError::Closed) => break,
                },
                // Slots moved (migration, failover): sharded subscriptions
                // must follow their slot's node.
                change = command_changes.recv(), if cluster_events => match change {
                    Ok(_) | Err(RecvError::Lagged(_)) => {
                        follow_slots(&subscriber, &registry, command_timeout).await;
                        // The control channel and the observed elections'
                        // follow their slots too (an SSUBSCRIBE of a channel
                        // already subscribed there changes nothing).
                        control.subscribe(&subscriber, command_timeout).await;
                        control.subscribe_observed(&subscriber, command_timeout).await;
                    }
                    Err(RecvError::Closed) => cluster_events = false,
                },
                message = messages.recv() => match message {
                    Ok(message) => deliver(&registry, &control, &message),
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "relaylock: release messages were dropped (subscriber lagged); waking every waiter");
                        registry.wake_all();
                        control.observers.wake_all();
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = beats.tick() => {
                    heartbeat(&subscriber, &registry, control.observers.any(), command_timeout, &mut probe).await;
                }
            }
        }
        if let Some(p) = probe {
            p.abort();
        }
        tracing::debug!("relaylock: subscriber task ended");
    }
}

/// A message on a subscribed channel: to the control channel's handler or
/// to the registry.
fn deliver(registry: &Registry, control: &Control, message: &fred::types::Message) {
    tracing::trace!(target: "relaylock::hop", hop = "message_received");
    let payload = message.value.as_str().unwrap_or_default();
    control.or_registry(registry, &message.channel, &payload);
}

/// The heartbeat, while any channel is subscribed: in a cluster, follow
/// the slot map; and check the subscriber connection is alive, one probe
/// at a time (`probe`).
async fn heartbeat(
    subscriber: &SubscriberClient,
    registry: &Arc<Registry>,
    observing: bool,
    command_timeout: Duration,
    probe: &mut Option<JoinHandle<()>>,
) {
    if subscriber.is_clustered() && registry.has_channels() {
        follow_slots(subscriber, registry, command_timeout).await;
    }
    let idle = probe.as_ref().is_none_or(JoinHandle::is_finished);
    if idle && (registry.has_channels() || observing) {
        *probe = Some(tokio::spawn(check_alive(
            subscriber.clone(),
            Arc::clone(registry),
            command_timeout,
        )));
    }
}

/// Subscribe again every channel the registry holds (which wakes every
/// waiter) and the control channel: after a reconnect, a lagged stream or a
/// restart of this task.
async fn resubscribe(
    subscriber: &SubscriberClient,
    registry: &Registry,
    control: &Control,
    limit: Duration,
) {
    registry.resubscribe_all().await;
    control.subscribe(subscriber, limit).await;
    control.subscribe_observed(subscriber, limit).await;
}

/// PING the subscriber connection. If it stays silent for `limit` while fred
/// believes it connected (and no reconnect happened meanwhile), force a
/// reconnect, which resubscribes and wakes every waiter. The reconnect is
/// awaited, not timed out, and only one check runs at a time, so at most one
/// forced reconnect is ever queued; while fred is reconnecting anyway
/// (Redis down), none is.
async fn check_alive(subscriber: SubscriberClient, registry: Arc<Registry>, limit: Duration) {
    let before = registry.connection();
    let Err(e) = registry.ping_every_node(limit).await else {
        return;
    };
    let silent = *e.kind() == fred::error::ErrorKind::Timeout;
    if silent && subscriber.is_connected() && registry.connection() == before {
        tracing::warn!("relaylock: the subscriber connection did not answer a PING within {limit:?}; reconnecting");
        let _ = subscriber.force_reconnection().await;
    }
}

/// Re-read the subscriber's slot map; if any subscribed channel's slot is
/// no longer served by the node it was subscribed on, subscribe the channels
/// again (each to its new node, where the next release will be published)
/// and wake every waiter (a release may have gone to the new node before).
/// The check compares with the node recorded at subscription, so a map that
/// fred already refreshed by itself (after a MOVED) is followed too.
async fn follow_slots(subscriber: &SubscriberClient, registry: &Registry, limit: Duration) {
    if let Err(e) = crate::error::with_timeout(limit, subscriber.sync_cluster()).await {
        tracing::warn!(error = %e, "relaylock: could not refresh the subscriber's cluster map");
    }
    if registry.any_channel_moved() {
        tracing::info!("relaylock: a subscribed slot moved; resubscribing and waking every waiter");
        registry.resubscribe_all().await;
    }
}
