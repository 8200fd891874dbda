//! The connections `min_replicas` acquisitions `WAIT` on. `WAIT` blocks its
//! connection, so each call checks one out for itself; the pool is opened on
//! first use.
//!
//! `WAIT` counts the replicas that acknowledged the replication offset Redis
//! recorded for ITS connection. After fred reconnects, that connection may
//! lead to another server (a failover moved the primary), whose offsets
//! belong to another replication stream: the count then says nothing of the
//! lock written before. So a call that writes and then `WAIT`s watches the
//! connection ([`Checkout::watch`]) and trusts the count only if no new
//! connection was opened in between. (The likely cause of a Sentinel
//! failover test failure in CI: a `WAIT` sent after the old primary closed
//! its connections can go to the new primary and confirm a lock that server
//! never had. A reconnect to the same server would be harmless, but the two
//! cannot be told apart.)

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::interfaces::{ClientLike, ClusterInterface, EventInterface};
use fred::types::config::Server;
use fred::types::Builder;
use tokio::sync::broadcast::error::TryRecvError;
use tokio::sync::broadcast::Receiver;
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};

use crate::error::{connect_within, Error, Result};

/// The replica connections of one client, opened on first use with the
/// command connection's configuration.
pub(crate) struct Replicas {
    pool: OnceCell<ReplicaPool>,
    connections: usize,
    builder: Builder,
    connect_timeout: Duration,
    /// The client is gone. Read and written under this lock together with
    /// the pool's state, so a pool opened while the client was dropped is
    /// quit by one side or the other (found in review: 4 connections left
    /// open when the last clone was dropped during the pool's connect).
    closed: Mutex<bool>,
}

impl Replicas {
    pub(crate) fn new(
        builder: Builder,
        connections: usize,
        connect_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Replicas {
            pool: OnceCell::new(),
            connections,
            builder,
            connect_timeout,
            closed: Mutex::new(false),
        })
    }

    /// Check out a connection for exclusive use (no other command may queue
    /// behind a `WAIT`). The pool is opened on first use, in a task of its
    /// own: a caller that goes away meanwhile neither leaks half-open
    /// connections nor makes the next caller open another pool.
    pub(crate) async fn checkout(self: &Arc<Self>) -> Result<Checkout<'_>> {
        if self.pool.get().is_none() {
            let replicas = Arc::clone(self);
            let opened = tokio::spawn(async move {
                replicas
                    .pool
                    .get_or_try_init(|| async {
                        let pool = replicas.builder.build_pool(replicas.connections)?;
                        connect_within(&pool, replicas.connect_timeout).await?;
                        Ok::<_, Error>(ReplicaPool::new(pool))
                    })
                    .await
                    .map(|_| ())?;
                // Opened for a client that went away meanwhile: close it.
                let closed = *replicas.closed.lock().unwrap_or_else(|p| p.into_inner());
                if closed {
                    if let Some(pool) = replicas.pool.get() {
                        let _ = pool.pool.quit().await;
                    }
                }
                Ok::<_, Error>(())
            });
            opened.await.map_err(|e| {
                Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::Unknown,
                    format!("opening the replica connections failed: {e}"),
                ))
            })??;
        }
        let pool = self.pool.get().expect("opened above");
        pool.checkout().await
    }

    /// The client is going away: the pool, if it was opened, to close it.
    /// A pool still being opened is closed by its opening task.
    pub(crate) fn close(&self) -> Option<Pool> {
        let mut closed = self.closed.lock().unwrap_or_else(|p| p.into_inner());
        *closed = true;
        self.pool.get().map(|p| p.pool.clone())
    }
}

/// The open pool; each connection is checked out by one call at a time.
struct ReplicaPool {
    pool: Pool,
    free: Mutex<Vec<usize>>,
    permits: Semaphore,
}

/// One replica-pool connection, returned to the pool on drop.
pub(crate) struct Checkout<'a> {
    pool: &'a ReplicaPool,
    index: usize,
    _permit: SemaphorePermit<'a>,
}

impl ReplicaPool {
    fn new(pool: Pool) -> Self {
        let n = pool.clients().len();
        ReplicaPool {
            pool,
            free: Mutex::new((0..n).collect()),
            permits: Semaphore::new(n),
        }
    }

    /// Wait for a free connection. Each holder keeps it for one bounded
    /// renew + `WAIT`, so the wait is bounded too.
    async fn checkout(&self) -> Result<Checkout<'_>> {
        let permit = self.permits.acquire().await.map_err(|_| {
            Error::Redis(fred::error::Error::new(
                fred::error::ErrorKind::Canceled,
                "relaylock: replica pool closed",
            ))
        })?;
        let index = self
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .expect("a permit guarantees a free connection");
        Ok(Checkout {
            pool: self,
            index,
            _permit: permit,
        })
    }
}

impl Checkout<'_> {
    pub(crate) fn client(&self) -> &Client {
        &self.pool.pool.clients()[self.index]
    }

    /// Start watching this connection: [`Watch::unchanged`] later tells
    /// whether every command sent in between went to the same connection.
    /// `slot`: in Redis Cluster, the hash slot the commands go to (their
    /// node's connection is the one watched).
    pub(crate) fn watch(&self, slot: Option<u16>) -> Watch {
        same_connection(self.client(), slot)
    }
}

/// Watch `client`'s connection (of `slot`'s node in a cluster) from now on.
/// See [`Watch`].
pub(crate) fn same_connection(client: &Client, slot: Option<u16>) -> Watch {
    // Subscribed BEFORE anything is sent: fred announces a new connection
    // (`broadcast_reconnect`) before it writes any caller's command on it
    // (only its handshake goes first), so every connection a later command
    // could go to is announced to this receiver.
    let reconnects = client.reconnect_rx();
    let route = slot.and_then(|s| node_of(client, s));
    Watch {
        reconnects,
        slot,
        route,
    }
}

/// The cluster node fred routes `slot` to now.
fn node_of(client: &Client, slot: u16) -> Option<Server> {
    client
        .cached_cluster_state()
        .and_then(|state| state.get_server(slot).cloned())
}

/// Whether the commands of one checkout all went to one connection: fred
/// opened no new connection (for the slot's node, in a cluster) and routes
/// the slot to the same node as when the watch began.
pub(crate) struct Watch {
    reconnects: Receiver<Server>,
    slot: Option<u16>,
    route: Option<Server>,
}

impl Watch {
    /// In a cluster, the node the slot was routed to when the watch began
    /// (commands pinned to it cannot silently go elsewhere).
    pub(crate) fn node(&self) -> Option<&Server> {
        self.route.as_ref()
    }

    /// `true` when every command sent since the watch began went to the
    /// connection that was current then. Call it after the last reply: a
    /// command written on a newer connection was announced before it was
    /// written, so before its reply.
    pub(crate) fn unchanged(&mut self, client: &Client) -> bool {
        // In a cluster, only a new connection to the watched node counts;
        // anywhere else, any new connection does.
        let only = self.slot.and(self.route.as_ref());
        if !no_new_connection(&mut self.reconnects, only) {
            return false;
        }
        match self.slot {
            Some(slot) => self.route.is_some() && node_of(client, slot) == self.route,
            None => true,
        }
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        // Back before the permit (a field, dropped after this) is returned.
        self.pool
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.index);
    }
}

/// Whether `reconnects` announced no new connection since it subscribed
/// (with `only`, none to that server). Missed announcements (`Lagged`) and
/// a replaced sender (`Closed`, after `QUIT`) count as a new connection.
fn no_new_connection(reconnects: &mut Receiver<Server>, only: Option<&Server>) -> bool {
    loop {
        match reconnects.try_recv() {
            Err(TryRecvError::Empty) => return true,
            Ok(server) => {
                if only.is_none_or(|watched| *watched == server) {
                    return false;
                }
            }
            Err(TryRecvError::Lagged(_) | TryRecvError::Closed) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::interfaces::KeysInterface;
    use fred::types::config::{Config, ReconnectPolicy};
    use relaylock_testkit::RedisServer;

    fn server(port: u16) -> Server {
        Server::new("127.0.0.1", port)
    }

    /// The announcements a watch counts, without a server: none; any
    /// (single server, Sentinel); only the watched node's (cluster); and the
    /// unknowns (missed announcements, a replaced sender) as changes.
    #[test]
    fn which_announcements_count() {
        let (tx, _) = tokio::sync::broadcast::channel(4);
        let mut rx = tx.subscribe();
        assert!(no_new_connection(&mut rx, None), "nothing announced");

        tx.send(server(1)).unwrap();
        assert!(!no_new_connection(&mut rx, None), "any counts");

        let mut rx = tx.subscribe();
        tx.send(server(2)).unwrap();
        assert!(no_new_connection(&mut rx, Some(&server(1))), "another node");
        tx.send(server(2)).unwrap();
        tx.send(server(1)).unwrap();
        assert!(!no_new_connection(&mut rx, Some(&server(1))), "the node");

        let mut rx = tx.subscribe();
        for port in 2..8 {
            tx.send(server(port)).unwrap();
        }
        assert!(
            !no_new_connection(&mut rx, Some(&server(1))),
            "missed announcements may include the node's"
        );

        let mut rx = tx.subscribe();
        drop(tx);
        assert!(!no_new_connection(&mut rx, None), "a closed channel");
    }

    /// The watch against a real server: commands on one connection leave it
    /// unchanged; a reconnect after it began (here forced, in production a
    /// dropped connection or a failover) is seen, and one before it began
    /// is not.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_watch_sees_a_reconnect_after_it_began() {
        let server = RedisServer::start();
        // Reconnecting as relaylock's own connections do.
        let client = Builder::from_config(Config::from_url(&server.url()).unwrap())
            .set_policy(ReconnectPolicy::new_constant(0, 10))
            .build()
            .unwrap();
        client.init().await.unwrap();

        let mut watch = same_connection(&client, None);
        let _: () = client.set("k", "1", None, None, false).await.unwrap();
        let _: Option<String> = client.get("k").await.unwrap();
        assert!(watch.unchanged(&client), "nothing reconnected");

        let mut watch = same_connection(&client, None);
        let _: () = client.set("k", "2", None, None, false).await.unwrap();
        client.force_reconnection().await.unwrap();
        let _: Option<String> = client.get("k").await.unwrap();
        assert!(!watch.unchanged(&client), "the reconnect must be seen");

        // Begun after the reconnect: that one is not counted.
        let mut watch = same_connection(&client, None);
        let _: Option<String> = client.get("k").await.unwrap();
        assert!(watch.unchanged(&client));

        let _ = client.quit().await;
    }
}
