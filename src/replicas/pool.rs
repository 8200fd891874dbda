//! The connections `min_replicas` acquisitions `WAIT` on. `WAIT` blocks its
//! connection, so each call checks one out for itself; the pool is opened on
//! first use.
//!
//! `WAIT` counts the replicas that acknowledged the replication offset Redis
//! recorded for ITS connection. After fred reconnects, that connection may
//! lead to another server (a failover moved the primary), whose offsets
//! belong to another replication stream: the count then says nothing of the
//! lock written before. So a call that writes and then `WAIT`s watches the
//! connection ([`Checkout::watch`], see `crate::conn_watch`) and trusts the
//! count only if no new connection was opened in between: a `WAIT` sent
//! after the old primary closed its connections can go to the new primary
//! and confirm a lock that server never had. A reconnect to the same server
//! would be harmless, but the two cannot be told apart, so any new
//! connection voids the count.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::{Client, Pool};
use fred::interfaces::ClientLike;
use fred::types::Builder;
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};

use crate::conn_watch::{same_connection, Watch};
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
    /// quit by one side or the other: no connection outlives the client.
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

    /// Start watching this connection for commands on `key`:
    /// [`Watch::unchanged`] later tells whether every command sent in
    /// between went to the same connection (in Redis Cluster, that of the
    /// key's node).
    pub(crate) fn watch(&self, key: &str) -> Watch {
        same_connection(self.client(), key)
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
