//! [`ClientInner`]: the state every clone of a
//! [`LockClient`](crate::LockClient) shares, and every guard keeps alive:
//! the script calls, the waiter registry, the watchdog, the replica
//! connections and the background tasks. Built by the builder, read by the
//! acquire loop and the guards; it calls into none of them.

use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::ClientLike;
use tokio::task::JoinHandle;

use crate::calls::Calls;
use crate::error::{Error, Result};
use crate::options::{validate_key, WaitStrategy};
use crate::registry::Registry;
use crate::replica_pool::Replicas;
use crate::scripts::Names;
use crate::watchdog::Watchdog;

/// The shared state of one client.
pub(crate) struct ClientInner {
    /// The script calls, on the command connection.
    pub(crate) calls: Calls,
    pub(crate) registry: Arc<Registry>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) replicas: Arc<Replicas>,
    pub(crate) prefix: String,
    pub(crate) default_lease: Duration,
    pub(crate) strategy: WaitStrategy,
    /// How long one command may take (relaylock's setting).
    pub(crate) command_timeout: Duration,
    /// What to stop and close when the last clone goes away.
    pub(crate) tasks: Tasks,
}

/// The background tasks and connections a client owns.
pub(crate) struct Tasks {
    pub(crate) subscriber: SubscriberClient,
    pub(crate) subscriber_task: JoinHandle<()>,
    pub(crate) watchdog_task: JoinHandle<()>,
    /// The command connection was opened by relaylock (not passed in with
    /// `fred_client`), so relaylock closes it.
    pub(crate) owns_redis: bool,
}

impl ClientInner {
    pub(crate) fn names(&self, key: &str) -> Names {
        Names::new(&self.prefix, key)
    }

    /// Checks a key: the limits, and in Redis Cluster that it can be a hash
    /// tag (a key starting with `}` gives `{}`, an empty tag, and its names
    /// would land in different slots).
    pub(crate) fn check_key(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        if self.calls.redis().is_clustered() && key.starts_with('}') {
            return Err(Error::InvalidArgument(
                "in Redis Cluster a lock key must not start with '}': it would be an empty hash tag"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        self.registry.close();
        self.tasks.subscriber_task.abort();
        self.tasks.watchdog_task.abort();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let subscriber = self.tasks.subscriber.clone();
            let redis = self.tasks.owns_redis.then(|| self.calls.redis().clone());
            let pool = self.replicas.close();
            let limit = self.command_timeout;
            handle.spawn(async move {
                let _ = tokio::time::timeout(limit, subscriber.quit()).await;
                if let Some(redis) = redis {
                    let _ = tokio::time::timeout(limit, redis.quit()).await;
                }
                if let Some(pool) = pool {
                    let _ = tokio::time::timeout(limit, pool.quit()).await;
                }
            });
        }
    }
}
