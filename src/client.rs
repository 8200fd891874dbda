//! [`LockClient`] and its builder: owns the fred clients, the scripts, the
//! registry and the subscriber task.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::clients::{Client, Pool, SubscriberClient};
use fred::interfaces::{ClientLike, KeysInterface};
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::{Builder, Value};
use tokio::sync::{OnceCell, Semaphore, SemaphorePermit};
use tokio::task::JoinHandle;

use crate::acquire;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::options::{
    validate_key, validate_lease, validate_prefix, validate_url_scheme, LockOptions, WaitStrategy,
    MAX_LEASE,
};
use crate::registry::Registry;
use crate::scripts::{Names, Scripts};
use crate::watchdog::{self, Watchdog};

/// A handle to relaylock on one Redis deployment.
///
/// Cheap to clone: clones share one command connection, one subscriber
/// connection, one waiter registry and one subscriber task. Dropping the last
/// clone (and the last guard) stops the subscriber task and closes the
/// connections relaylock opened.
///
/// ```no_run
/// # async fn demo() -> relaylock::Result<()> {
/// use std::time::Duration;
/// use relaylock::{LockClient, LockOptions};
///
/// let client = LockClient::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("orders:42").await?;
/// // ... the critical section; pass guard.fencing_token() to the resource ...
/// guard.release().await?;
///
/// let opts = LockOptions::default().wait(Duration::from_secs(2));
/// match client.lock_with("orders:42", opts).await {
///     Ok(guard) => guard.release().await?,
///     Err(relaylock::Error::Timeout) => { /* busy */ }
///     Err(e) => return Err(e),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) redis: Client,
    pub(crate) scripts: Scripts,
    pub(crate) registry: Arc<Registry>,
    pub(crate) prefix: String,
    pub(crate) default_lease: Duration,
    pub(crate) strategy: WaitStrategy,
    /// How long a lock's side hash, queue and void markers outlive it, in ms.
    pub(crate) side_retention_ms: u64,
    command_timeout: Duration,
    /// The timeout relaylock enforces on a command itself: `None` when the
    /// fred client enforces one (always when relaylock built it), so no
    /// second timer per command is needed.
    command_limit: Option<Duration>,
    subscriber: SubscriberClient,
    subscriber_task: JoinHandle<()>,
    owns_redis: bool,
    pub(crate) watchdog: Arc<Watchdog>,
    watchdog_task: JoinHandle<()>,
    /// Connections for `WAIT`ing for replicas, opened on first use with the
    /// command connection's configuration.
    replica_pool: OnceCell<ReplicaPool>,
    replica_connections: usize,
    connection_builder: Builder,
    connect_timeout: Duration,
}

impl Inner {
    pub(crate) fn names(&self, key: &str) -> Names {
        Names::new(&self.prefix, key)
    }

    /// Checks a key: the limits, and in Redis Cluster that it can be a hash
    /// tag (a key starting with `}` gives `{}`, an empty tag, and its names
    /// would land in different slots).
    pub(crate) fn check_key(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        if self.redis.is_clustered() && key.starts_with('}') {
            return Err(Error::InvalidArgument(
                "in Redis Cluster a lock key must not start with '}': it would be an empty hash tag"
                    .into(),
            ));
        }
        Ok(())
    }

    /// Run a command, bounded by the command timeout: fred's own when the
    /// client has one, else a timer here (a client passed in with
    /// `fred_client` may have none). A command cut short may still run in
    /// Redis: callers that care (acquire) arm their own clean-up.
    pub(crate) async fn bounded<T>(
        &self,
        command: impl std::future::Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T> {
        match self.command_limit {
            None => Ok(command.await?),
            Some(limit) => Ok(crate::error::bounded(limit, command).await?),
        }
    }

    /// Set the remaining lease of the lock `names` to `lease_ms` if it holds
    /// `token` (one-lock [`RENEW`](crate::scripts::RENEW), also when that
    /// shortens it), on `conn`. The script's reply: `[1]` set, `[0]` gone,
    /// `[-1]` another token.
    pub(crate) async fn set_lease(
        &self,
        conn: &Client,
        names: &Names,
        token: &str,
        lease_ms: u64,
    ) -> Result<Vec<i64>> {
        let keys = vec![names.lock.as_str(), names.side.as_str()];
        let args: Vec<Value> = vec![
            (self.side_retention_ms as i64).into(),
            "0".into(), // not grow-only
            token.into(),
            (lease_ms as i64).into(),
        ];
        self.bounded(self.scripts.renew.evalsha_with_reload(conn, keys, args))
            .await
    }

    /// How long one command may take (relaylock's setting).
    pub(crate) fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// Check out a connection of the replica pool for exclusive use (WAIT
    /// blocks its connection, so no other command may queue behind it). The
    /// pool is opened on first use, in a task of its own: a caller that goes
    /// away meanwhile neither leaks half-open connections nor makes the next
    /// caller open another pool.
    pub(crate) async fn replica_connection(self: &Arc<Self>) -> Result<Checkout<'_>> {
        if self.replica_pool.get().is_none() {
            let inner = Arc::clone(self);
            let opened = tokio::spawn(async move {
                inner
                    .replica_pool
                    .get_or_try_init(|| async {
                        let pool = inner
                            .connection_builder
                            .build_pool(inner.replica_connections)?;
                        init_bounded(&pool, inner.connect_timeout).await?;
                        Ok::<_, Error>(ReplicaPool::new(pool))
                    })
                    .await
                    .map(|_| ())
            });
            opened.await.map_err(|e| {
                Error::Redis(fred::error::Error::new(
                    fred::error::ErrorKind::Unknown,
                    format!("opening the replica connections failed: {e}"),
                ))
            })??;
        }
        let pool = self.replica_pool.get().expect("opened above");
        pool.checkout().await
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.registry.close();
        self.subscriber_task.abort();
        self.watchdog_task.abort();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let subscriber = self.subscriber.clone();
            let redis = self.owns_redis.then(|| self.redis.clone());
            let pool = self.replica_pool.get().map(|p| p.pool.clone());
            handle.spawn(async move {
                let _ = subscriber.quit().await;
                if let Some(redis) = redis {
                    let _ = redis.quit().await;
                }
                if let Some(pool) = pool {
                    let _ = pool.quit().await;
                }
            });
        }
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("prefix", &self.inner.prefix)
            .field("default_lease", &self.inner.default_lease)
            .field("strategy", &self.inner.strategy)
            .finish_non_exhaustive()
    }
}

impl LockClient {
    /// Connect to the Redis at `url` (`redis://[user:password@]host:port[/db]`)
    /// with every other setting at its default. See [`builder`](Self::builder).
    ///
    /// Fails with [`Error::InvalidArgument`] for a malformed URL and with
    /// [`Error::ConnectTimeout`] (or the connection error) when the server
    /// cannot be reached within the connect timeout (5 s by default).
    pub async fn connect(url: &str) -> Result<LockClient> {
        LockClient::builder().url(url).build().await
    }

    /// A builder with every setting at its default.
    pub fn builder() -> LockClientBuilder {
        LockClientBuilder::default()
    }

    /// Take the lock on `key`, waiting as long as it takes. Uses the client's
    /// default lease. Same as [`lock_with`](Self::lock_with) with default options.
    ///
    /// Cancel-safe: dropping the future leaves no lock held and no waiter
    /// registered, and a wake-up it received is passed on to the next waiter.
    pub async fn lock(&self, key: &str) -> Result<LockGuard> {
        self.lock_with(key, LockOptions::default()).await
    }

    /// Take the lock on `key` with the given options: a wait limit (then
    /// [`Error::Timeout`] when it runs out), a lease, a metrics name.
    pub async fn lock_with(&self, key: &str, options: LockOptions) -> Result<LockGuard> {
        acquire::lock(&self.inner, key, &options).await
    }

    /// Run `work` under the lock on `key`: take the lock (with `options`),
    /// run the closure, release the lock, and return the closure's value.
    ///
    /// If the lock is found lost while `work` runs (see
    /// [`LockGuard::lost`]), the closure's future is dropped at its next
    /// await point and the call fails with [`Error::LockLost`]. It also fails
    /// with `LockLost` when the release finds the lease already ran out,
    /// because another owner may then have run concurrently; the closure's
    /// value is lost with it, so make its effects safe to repeat (or fence
    /// them with [`LockGuard::fencing_token`]).
    ///
    /// ```no_run
    /// # async fn demo(client: relaylock::LockClient) -> relaylock::Result<()> {
    /// use relaylock::LockOptions;
    ///
    /// let total = client
    ///     .with_lock("ledger", LockOptions::default(), async |guard| {
    ///         // ... the critical section; guard.fencing_token() fences writes ...
    ///         guard.fencing_token() % 10
    ///     })
    ///     .await?;
    /// # let _ = total; Ok(()) }
    /// ```
    pub async fn with_lock<F, T>(&self, key: &str, options: LockOptions, work: F) -> Result<T>
    where
        F: AsyncFnOnce(&LockGuard) -> T,
    {
        let guard = self.lock_with(key, options).await?;
        let outcome = {
            let work = work(&guard);
            tokio::select! {
                biased;
                _ = guard.lost() => None,
                value = work => Some(value),
            }
        };
        match outcome {
            Some(value) => guard.release().await.map(|()| value),
            // Dropping the guard releases in the background, in case the
            // key is still ours (lost by the local clock alone).
            None => Err(Error::LockLost),
        }
    }

    /// One attempt, never waits: `Ok(None)` when another owner holds the lock.
    ///
    /// It takes only a free lock. While other clients queue for the key,
    /// each release reserves it for the client that waited longest (fair
    /// hand-over), so `try_lock` does not succeed until the queue is empty.
    pub async fn try_lock(&self, key: &str) -> Result<Option<LockGuard>> {
        self.try_lock_with(key, LockOptions::default()).await
    }

    /// [`try_lock`](Self::try_lock) with options (its wait limit is ignored).
    pub async fn try_lock_with(
        &self,
        key: &str,
        options: LockOptions,
    ) -> Result<Option<LockGuard>> {
        acquire::try_lock(&self.inner, key, &options).await
    }

    /// Whether anybody holds the lock on `key` right now (one `EXISTS`). A
    /// lock reserved for the next client during a hand-over (at most 50 ms)
    /// counts as locked. The answer can be stale by the time it arrives; use
    /// it for display only.
    pub async fn is_locked(&self, key: &str) -> Result<bool> {
        self.inner.check_key(key)?;
        let exists = self.inner.redis.exists(self.inner.names(key).lock);
        let n: i64 = self.inner.bounded(exists).await?;
        Ok(n > 0)
    }

    /// The Redis name of the lock on `key` (`<prefix>:{<key>}`), for
    /// inspection with other tools.
    pub fn redis_key(&self, key: &str) -> String {
        self.inner.names(key).lock
    }

    /// This client's id: how it appears in the queue of clients waiting for
    /// a lock (`<prefix>:{<key>}:q`) and in hand-over messages.
    pub fn client_id(&self) -> &str {
        self.inner.registry.client_id()
    }

    /// The prefix of every Redis name this client creates.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The fred client relaylock sends its commands on.
    pub fn fred_client(&self) -> &Client {
        &self.inner.redis
    }
}

/// Configures and connects a [`LockClient`], in the style of fred's builder.
///
/// ```no_run
/// # async fn demo() -> relaylock::Result<()> {
/// use std::time::Duration;
/// use relaylock::{LockClient, WaitStrategy};
///
/// let client = LockClient::builder()
///     .url("redis://127.0.0.1:6379")
///     .prefix("billing")                          // every Redis name starts "billing:"
///     .default_lease(Duration::from_secs(30))
///     .wait_strategy(WaitStrategy::PubSub)
///     .connect_timeout(Duration::from_secs(2))
///     .build()
///     .await?;
/// # drop(client); Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClientBuilder {
    url: Option<String>,
    fred_client: Option<Client>,
    fred_config: Option<Config>,
    prefix: String,
    default_lease: Duration,
    wait_strategy: WaitStrategy,
    connect_timeout: Duration,
    command_timeout: Duration,
    unsubscribe_linger: Duration,
    message_buffer: usize,
    replica_connections: usize,
    side_retention: Duration,
    #[cfg(feature = "tls")]
    tls_roots: Option<Vec<u8>>,
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may carry a password: never print it.
        f.debug_struct("LockClientBuilder")
            .field("url", &self.url.as_ref().map(|_| "<set>"))
            .field("fred_client", &self.fred_client.is_some())
            .field("fred_config", &self.fred_config.is_some())
            .field("prefix", &self.prefix)
            .field("default_lease", &self.default_lease)
            .field("wait_strategy", &self.wait_strategy)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("unsubscribe_linger", &self.unsubscribe_linger)
            .field("message_buffer", &self.message_buffer)
            .field("replica_connections", &self.replica_connections)
            .field("side_retention", &self.side_retention)
            .finish()
    }
}

impl Default for LockClientBuilder {
    fn default() -> Self {
        LockClientBuilder {
            url: None,
            fred_client: None,
            fred_config: None,
            prefix: "relaylock".into(),
            default_lease: Duration::from_secs(30),
            wait_strategy: WaitStrategy::PubSub,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
            unsubscribe_linger: Duration::from_millis(500),
            message_buffer: 1024,
            replica_connections: 4,
            side_retention: Duration::from_millis(crate::scripts::SIDE_RETENTION_MS),
            #[cfg(feature = "tls")]
            tls_roots: None,
        }
    }
}

impl LockClientBuilder {
    /// The Redis URL, as fred parses it: `redis://[[user]:password@]host[:port][/db]`.
    /// Default: `redis://127.0.0.1:6379`.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Connect with a fred configuration instead of a URL: any deployment
    /// fred supports (centralized, clustered, sentinel) with its TLS and
    /// authentication settings. relaylock still applies its own timeouts,
    /// reconnect policy and buffer sizes on top.
    ///
    /// ```no_run
    /// # async fn demo() -> relaylock::Result<()> {
    /// use fred::types::config::{Config, ServerConfig};
    ///
    /// let config = Config {
    ///     server: ServerConfig::new_clustered(vec![("10.0.0.1", 6379), ("10.0.0.2", 6379)]),
    ///     ..Config::default()
    /// };
    /// let client = relaylock::LockClient::builder().fred_config(config).build().await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn fred_config(mut self, config: Config) -> Self {
        self.fred_config = Some(config);
        self
    }

    /// Use an existing fred client for commands instead of a URL. relaylock
    /// opens its subscriber connection with the same configuration, connects
    /// the client if it is not connected yet, and never quits it.
    pub fn fred_client(mut self, client: Client) -> Self {
        self.fred_client = Some(client);
        self
    }

    /// The namespace of every Redis name relaylock creates. Default `relaylock`.
    /// Non-empty, at most 128 bytes, without `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of a lock taken without [`LockOptions::lease`]. The
    /// watchdog renews it at a third of the lease while the guard lives (see
    /// [`LockOptions::watchdog`]). Default 30 s.
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.default_lease = lease;
        self
    }

    /// How waiters wait. Default [`WaitStrategy::PubSub`].
    pub fn wait_strategy(mut self, strategy: WaitStrategy) -> Self {
        self.wait_strategy = strategy;
        self
    }

    /// How long `build` may take to connect before it fails with
    /// [`Error::ConnectTimeout`]. Also the TCP connect timeout of every later
    /// reconnect. Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long one Redis command may take, reconnects included, before it
    /// fails. Also the limit after which a connection that answers nothing is
    /// considered dead and replaced. Default 5 s. With a client passed in
    /// with [`fred_client`](Self::fred_client), the client's own
    /// `default_command_timeout` applies when it has one, and this one when
    /// it has none.
    pub fn command_timeout(mut self, timeout: Duration) -> Self {
        self.command_timeout = timeout;
        self
    }

    /// How long a channel stays subscribed after its last local waiter left,
    /// so a key in steady use is not resubscribed at every hand-over.
    /// Default 500 ms. Zero unsubscribes at once.
    pub fn unsubscribe_linger(mut self, linger: Duration) -> Self {
        self.unsubscribe_linger = linger;
        self
    }

    /// Release messages fred buffers for the subscriber task before it counts
    /// as lagging (then every waiter re-checks). Default 1024.
    pub fn message_buffer(mut self, messages: usize) -> Self {
        self.message_buffer = messages.max(1);
        self
    }

    /// How many extra connections serve acquisitions with
    /// [`LockOptions::min_replicas`]. `WAIT` blocks its connection until the
    /// replicas acknowledge or the timeout passes, so this many such
    /// acquisitions wait for replicas at the same time. Opened on first use.
    /// Default 4, between 1 and 64.
    pub fn replica_connections(mut self, connections: usize) -> Self {
        self.replica_connections = connections;
        self
    }

    /// Trust these certificate authorities (PEM, one or more certificates)
    /// for TLS instead of the system's roots: for a private CA. Implies TLS
    /// for a `redis://` URL too. Feature `tls`.
    ///
    /// ```no_run
    /// # async fn demo() -> relaylock::Result<()> {
    /// let ca = std::fs::read("ca.crt").unwrap();
    /// let client = relaylock::LockClient::builder()
    ///     .url("rediss://relay:secret@redis.internal:6380")
    ///     .tls_root_certificates_pem(ca)
    ///     .build()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_root_certificates_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots = Some(pem.into());
        self
    }

    /// How long a lock's bookkeeping outlives its last use: the side hash
    /// (fencing counter, recently released tokens), the queue of waiting
    /// clients and the markers of abandoned acquisitions. Within this window
    /// a replayed release is recognised as ours and a server clock stepping
    /// back cannot make fencing tokens go backwards; past it, nothing of the
    /// lock stays in Redis. Default 60 s
    /// ([`SIDE_RETENTION_MS`](crate::scripts::SIDE_RETENTION_MS)), between
    /// 1 s and 1 day. Every client of one prefix should use the same value.
    pub fn side_retention(mut self, retention: Duration) -> Self {
        self.side_retention = retention;
        self
    }

    /// Check the settings, connect both connections, load the scripts and
    /// start the subscriber task.
    pub async fn build(self) -> Result<LockClient> {
        validate_prefix(&self.prefix)?;
        validate_lease(self.default_lease)?;
        let poll = match self.wait_strategy {
            WaitStrategy::Poll(interval) => Some(("poll interval", interval)),
            WaitStrategy::PubSub => None,
        };
        for (what, d) in [
            ("connect_timeout", self.connect_timeout),
            ("command_timeout", self.command_timeout),
        ]
        .into_iter()
        .chain(poll)
        {
            if d.is_zero() || d > Duration::from_secs(3600) {
                return Err(Error::InvalidArgument(format!(
                    "{what} {d:?} must be between 1 ms and 1 h"
                )));
            }
        }
        if self.side_retention < Duration::from_secs(1) || self.side_retention > MAX_LEASE {
            return Err(Error::InvalidArgument(format!(
                "side_retention {:?} must be between 1 s and 1 day",
                self.side_retention
            )));
        }
        if !(1..=64).contains(&self.replica_connections) {
            return Err(Error::InvalidArgument(format!(
                "replica_connections {} must be between 1 and 64",
                self.replica_connections
            )));
        }
        #[cfg(feature = "tls")]
        if self.tls_roots.is_some() && self.fred_client.is_some() {
            return Err(Error::InvalidArgument(
                "tls_root_certificates_pem does not apply to a fred_client: configure TLS on that client".into(),
            ));
        }
        let sources = [
            self.url.is_some(),
            self.fred_client.is_some(),
            self.fred_config.is_some(),
        ];
        if sources.into_iter().filter(|s| *s).count() > 1 {
            return Err(Error::InvalidArgument(
                "set one of url, fred_config and fred_client".into(),
            ));
        }

        let (redis, owns_redis, builder) = match self.fred_client {
            Some(client) => {
                let mut builder = Builder::from_config(client.client_config());
                builder
                    .set_connection_config(client.connection_config().clone())
                    .set_performance_config(client.perf_config());
                // Only the subscriber is built here: the client's own command
                // settings stay as the user set them.
                bound_commands(&mut builder, self.command_timeout, self.message_buffer);
                builder.set_policy(
                    client
                        .client_reconnect_policy()
                        .unwrap_or_else(default_policy),
                );
                (client, false, builder)
            }
            None => {
                #[allow(unused_mut)]
                let mut config = match self.fred_config {
                    Some(config) => config,
                    None => {
                        let url = self.url.as_deref().unwrap_or("redis://127.0.0.1:6379");
                        validate_url_scheme(url)?;
                        Config::from_url(url).map_err(|e| {
                            Error::InvalidArgument(format!("invalid Redis URL: {}", e.details()))
                        })?
                    }
                };
                #[cfg(feature = "tls")]
                if let Some(pem) = &self.tls_roots {
                    config.tls = Some(tls_with_roots(pem)?.into());
                }
                let mut builder = Builder::from_config(config);
                builder
                    .with_connection_config(|c| {
                        c.connection_timeout = self.connect_timeout;
                        c.internal_command_timeout = self.connect_timeout;
                        c.tcp.nodelay = Some(true);
                    })
                    .set_policy(default_policy());
                bound_commands(&mut builder, self.command_timeout, self.message_buffer);
                (builder.build()?, true, builder)
            }
        };
        let subscriber = builder.build_subscriber_client()?;

        let fred_times_out = !redis.perf_config().default_command_timeout.is_zero();
        let command_limit = (!fred_times_out).then_some(self.command_timeout);
        if !redis.is_connected() {
            init_bounded(&redis, self.connect_timeout).await?;
        }
        if let Err(e) = init_bounded(&subscriber, self.connect_timeout).await {
            if owns_redis {
                let _ = tokio::time::timeout(self.connect_timeout, redis.quit()).await;
            }
            return Err(e);
        }

        let scripts = Scripts::new();
        let loaded = async {
            scripts.acquire.load(&redis).await?;
            scripts.release.load(&redis).await?;
            scripts.renew.load(&redis).await
        };
        if let Err(e) = crate::error::bounded(self.command_timeout, loaded).await {
            let _ = subscriber.quit().await;
            if owns_redis {
                let _ = redis.quit().await;
            }
            return Err(e.into());
        }

        // Redis Cluster: sharded pub/sub (SSUBSCRIBE, SPUBLISH) keeps each
        // release message within the lock's shard. It needs Redis 7.
        let clustered = redis.is_clustered();
        let sharded = clustered && redis.server_version().is_some_and(|v| v.major >= 7);
        if clustered && !sharded {
            tracing::warn!(
                version = ?redis.server_version(),
                "relaylock: Redis Cluster without sharded pub/sub (needs Redis 7): falling back to PUBLISH/SUBSCRIBE, which broadcasts every release to every node"
            );
        }

        crate::metrics::describe();
        // 16 hex digits of a random UUID: unique among the clients of a lock
        // with overwhelming probability, short in the queue hash and messages.
        let client_id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
        let registry = Arc::new(Registry::new(
            subscriber.clone(),
            redis.clone(),
            client_id,
            self.unsubscribe_linger,
            self.command_timeout,
            sharded,
        ));
        let subscriber_task = crate::subscriber::spawn(
            &subscriber,
            &redis,
            Arc::clone(&registry),
            self.command_timeout,
        );

        let side_retention_ms = self.side_retention.as_millis() as u64;
        let watchdog = Watchdog::new(
            redis.clone(),
            scripts.renew.clone(),
            command_limit,
            side_retention_ms,
        );
        let watchdog_task = watchdog::spawn(&watchdog);
        Ok(LockClient {
            inner: Arc::new(Inner {
                redis,
                scripts,
                registry,
                prefix: self.prefix,
                default_lease: self.default_lease,
                strategy: self.wait_strategy,
                side_retention_ms,
                command_timeout: self.command_timeout,
                command_limit,
                subscriber,
                subscriber_task,
                owns_redis,
                watchdog,
                watchdog_task,
                replica_pool: OnceCell::new(),
                replica_connections: self.replica_connections,
                connection_builder: builder,
                connect_timeout: self.connect_timeout,
            }),
        })
    }
}

/// The connections `min_replicas` acquisitions `WAIT` on, each checked out
/// by one call at a time.
pub(crate) struct ReplicaPool {
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

/// A rustls connector trusting exactly the certificates in `pem`.
#[cfg(feature = "tls")]
fn tls_with_roots(pem: &[u8]) -> Result<fred::types::config::TlsConnector> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|e| {
            Error::InvalidArgument(format!("TLS root certificates: invalid PEM: {e}"))
        })?;
        roots
            .add(cert)
            .map_err(|e| Error::InvalidArgument(format!("TLS root certificates: {e}")))?;
    }
    if roots.is_empty() {
        return Err(Error::InvalidArgument(
            "TLS root certificates: no certificate in the PEM".into(),
        ));
    }
    // ring explicitly: `ClientConfig::builder()` panics when the
    // application also enables another rustls provider and installed none.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::InvalidArgument(format!("TLS configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config.into())
}

/// Commands time out after `command_timeout`, a connection that leaves one
/// unanswered that long is replaced, and the message stream buffers
/// `message_buffer` messages.
fn bound_commands(builder: &mut Builder, command_timeout: Duration, message_buffer: usize) {
    builder
        .with_connection_config(|c| {
            c.unresponsive.max_timeout = Some(command_timeout);
            c.unresponsive.interval = (command_timeout / 4).max(Duration::from_millis(10));
        })
        .with_performance_config(|p| {
            p.default_command_timeout = command_timeout;
            p.broadcast_channel_capacity = message_buffer;
        });
}

/// Reconnect forever, 50 ms doubling up to 2 s between attempts.
fn default_policy() -> ReconnectPolicy {
    ReconnectPolicy::new_exponential(0, 50, 2_000, 2)
}

/// Connect, or give up after `timeout` and stop the client's reconnect loop.
async fn init_bounded<C: ClientLike>(client: &C, timeout: Duration) -> Result<()> {
    let outcome = tokio::time::timeout(timeout, client.init()).await;
    let error = match outcome {
        Ok(Ok(_task)) => return Ok(()),
        Ok(Err(e)) => Error::Redis(e),
        Err(_) => Error::ConnectTimeout(timeout),
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
    Err(error)
}
