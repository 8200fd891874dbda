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
//! fred's own `manage_subscriptions()` is deliberately not used: it resubscribes
//! from fred's channel set concurrently with this task, so the wake-up could
//! reach waiters before their channel is subscribed again, and its SUBSCRIBE
//! could overtake the registry's UNSUBSCRIBE of a channel nobody waits on.

use std::sync::Arc;

use fred::clients::SubscriberClient;
use fred::interfaces::EventInterface;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::registry::Registry;

/// Spawn the subscriber task. It ends when the subscriber client quits (its
/// streams close) or when the handle is aborted.
pub(crate) fn spawn(subscriber: &SubscriberClient, registry: Arc<Registry>) -> JoinHandle<()> {
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                biased;
                event = reconnects.recv() => match event {
                    Ok(server) => {
                        tracing::info!(%server, "relaylock: subscriber reconnected; resubscribing and waking every waiter");
                        registry.resubscribe_all().await;
                    }
                    Err(RecvError::Lagged(_)) => registry.resubscribe_all().await,
                    Err(RecvError::Closed) => break,
                },
                message = messages.recv() => match message {
                    Ok(message) => {
                        tracing::trace!(target: "relaylock::hop", hop = "message_received");
                        let payload = message.value.as_str().unwrap_or_default();
                        registry.on_message(&message.channel, &payload);
                    }
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "relaylock: release messages were dropped (subscriber lagged); waking every waiter");
                        registry.wake_all();
                    }
                    Err(RecvError::Closed) => break,
                },
            }
        }
        tracing::debug!("relaylock: subscriber task ended");
    })
}
