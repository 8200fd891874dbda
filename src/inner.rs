//! [`ClientInner`]: the state every clone of a
//! [`LockClient`](crate::LockClient) shares, and every guard keeps alive:
//! the script calls, the waiter registry, the watchdog, the replica
//! connections and the background tasks. Built by the builder, read by the
//! acquire loop and the guards; it calls into none of them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::interfaces::ClientLike;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

use crate::calls::Calls;
use crate::error::{Error, Result};
use crate::options::{validate_key, WaitStrategy};
use crate::registry::Registry;
use crate::replicas::Replicas;
use crate::scripts::Names;
use crate::watchdog::Watchdog;

/// The shared state of one client.
pub(crate) struct ClientInner {
    /// The script calls, on the command connection.
    pub(crate) calls: Calls,
    pub(crate) registry: Arc<Registry>,
    /// The elections this client observes (`crate::observers`).
    pub(crate) observers: Arc<crate::observers::Observers>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) replicas: Arc<Replicas>,
    /// Who this client is, for operators (`crate::identity`).
    pub(crate) identity: crate::identity::Identity,
    pub(crate) prefix: String,
    pub(crate) default_lease: Duration,
    pub(crate) strategy: WaitStrategy,
    /// How long one command may take (relaylock's setting).
    pub(crate) command_timeout: Duration,
    /// What to stop and close when the last clone goes away.
    pub(crate) tasks: Tasks,
    /// Cancelled when the shutdown begins: lock calls in progress end with
    /// [`Error::Shutdown`], new ones are refused.
    pub(crate) closing: Closing,
    /// What the shutdown waits for: background releases and queue leaves,
    /// lock calls and releases in progress.
    pub(crate) background: TaskTracker,
    /// Set once a shutdown completed (a later one returns at once).
    pub(crate) shut_down: tokio::sync::OnceCell<()>,
}

/// The background tasks and connections a client owns.
pub(crate) struct Tasks {
    pub(crate) subscriber: SubscriberClient,
    pub(crate) subscriber_task: JoinHandle<()>,
    pub(crate) watchdog_task: JoinHandle<()>,
    /// Reads the eviction setting of every server connected to anew.
    pub(crate) eviction_task: JoinHandle<()>,
    /// Writes this client's identity record again every 12 hours.
    pub(crate) identity_task: JoinHandle<()>,
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
    ///
    /// Every public call checks its key first, so this is also where a call
    /// made after [`shutdown`](crate::LockClient::shutdown) began is refused.
    pub(crate) fn check_key(&self, key: &str) -> Result<()> {
        self.check_open()?;
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

/// The shutdown's start: a flag every call reads, and the wake-up of the
/// calls in progress. A `CancellationToken` would take its one lock, shared
/// by every task of the client, for each check and for each call's
/// registration; the flag is one atomic load, and the calls wait on one of
/// `SHARDS` `Notify`s (by thread), so that tasks on different threads
/// rarely share a lock.
#[derive(Default)]
pub(crate) struct Closing {
    flag: AtomicBool,
    wakers: [Notify; SHARDS],
}

const SHARDS: usize = 8;

impl Closing {
    /// Begin the shutdown: set the flag, then wake every call waiting.
    pub(crate) fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
        for w in &self.wakers {
            w.notify_waiters();
        }
    }

    /// Whether the shutdown began.
    pub(crate) fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Completes once the shutdown began. The `Notified` is made before the
    /// flag is read: `notify_waiters` wakes every one made before it, so a
    /// shutdown that sets the flag after the read still wakes this one.
    pub(crate) async fn cancelled(&self) {
        thread_local! {
            static SHARD: usize = {
                static NEXT: AtomicUsize = AtomicUsize::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS
            };
        }
        let shard = SHARD.try_with(|s| *s).unwrap_or(0);
        let notified = self.wakers[shard].notified();
        if self.is_cancelled() {
            return;
        }
        notified.await;
    }
}

impl ClientInner {
    /// [`Error::Shutdown`] once the shutdown began.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closing.is_cancelled() {
            return Err(Error::Shutdown);
        }
        Ok(())
    }

    /// Stop the background tasks, and close the connections relaylock
    /// opened: what the shutdown ends with, and what dropping the last
    /// clone does (in the background).
    pub(crate) fn stop(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.registry.close();
        self.tasks.subscriber_task.abort();
        self.tasks.watchdog_task.abort();
        self.tasks.eviction_task.abort();
        self.tasks.identity_task.abort();
        let subscriber = self.tasks.subscriber.clone();
        let redis = self.tasks.owns_redis.then(|| self.calls.redis().clone());
        let pool = self.replicas.close();
        let limit = self.command_timeout;
        async move {
            let _ = tokio::time::timeout(limit, subscriber.quit()).await;
            if let Some(redis) = redis {
                let _ = tokio::time::timeout(limit, redis.quit()).await;
            }
            if let Some(pool) = pool {
                let _ = tokio::time::timeout(limit, pool.quit()).await;
            }
        }
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        let stopping = self.stop();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(stopping);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every call waiting when the shutdown begins wakes, whichever shard
    /// its thread uses; one that starts after returns at once; and a wait
    /// racing the shutdown never misses it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn closing_wakes_every_waiter() {
        let limit = Duration::from_secs(5);
        let closing = Arc::new(Closing::default());
        let waiters: Vec<_> = (0..64)
            .map(|_| {
                let c = Arc::clone(&closing);
                tokio::spawn(async move { c.cancelled().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        closing.cancel();
        for w in waiters {
            tokio::time::timeout(limit, w).await.unwrap().unwrap();
        }
        tokio::time::timeout(limit, closing.cancelled())
            .await
            .unwrap();
        for _ in 0..500 {
            let closing = Arc::new(Closing::default());
            let waiter = {
                let c = Arc::clone(&closing);
                tokio::spawn(async move { c.cancelled().await })
            };
            let canceller = {
                let c = Arc::clone(&closing);
                tokio::spawn(async move { c.cancel() })
            };
            canceller.await.unwrap();
            tokio::time::timeout(limit, waiter).await.unwrap().unwrap();
            assert!(closing.is_cancelled());
        }
    }
}
