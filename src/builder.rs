//! [`LockClientBuilder`]: the settings of a client, checked and turned into
//! connections, scripts and background tasks by [`build`](LockClientBuilder::build).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::{Client, SubscriberClient};
use fred::interfaces::ClientLike;
use fred::types::config::{Config, ReconnectPolicy};
use fred::types::Builder;
use tokio_util::task::TaskTracker;

use crate::calls::Calls;
use crate::error::{connect_within, with_timeout, Error, Result};
use crate::eviction::{self, OnEvictingServer};
use crate::identity::{self, Identity};
use crate::inner::{ClientInner, Closing, Tasks};
use crate::observers::Observers;
use crate::options::{
    validate_lease, validate_prefix, validate_url_scheme, WaitStrategy, MAX_LEASE,
};
use crate::registry::Registry;
use crate::replicas::Replicas;
use crate::scripts::Scripts;
use crate::watchdog::{self, Watchdog};

/// Configures and connects a [`LockClient`](crate::client::LockClient), in the style of fred's builder.
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
#[must_use = "a builder does nothing until `build` is awaited"]
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
    on_evicting: OnEvictingServer,
    name: Option<String>,
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
            .field("on_evicting_server", &self.on_evicting)
            .field("name", &self.name)
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
            on_evicting: OnEvictingServer::Warn,
            name: None,
            #[cfg(feature = "tls")]
            tls_roots: None,
        }
    }
}

impl LockClientBuilder {
    /// The longest `connect_timeout`, `command_timeout`,
    /// `unsubscribe_linger` and [`WaitStrategy::Poll`] interval (1 h): every
    /// setting has an upper bound, checked by [`build`](Self::build).
    pub const MAX_DURATION: Duration = Duration::from_secs(3600);

    /// The largest [`message_buffer`](Self::message_buffer): 1,048,576
    /// messages.
    pub const MAX_MESSAGE_BUFFER: usize = 1 << 20;

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
    /// opens its subscriber connection with the same configuration and
    /// connects the client if it is not connected yet; if that does not
    /// succeed within the connect timeout, it stops the reconnect loop it
    /// started. Otherwise relaylock never quits it.
    ///
    /// The client keeps its own reconnect policy, and the subscriber gets
    /// the same one ([`reconnect_policy`] when the client has none). A
    /// client without a policy never reconnects; one whose first attempt is
    /// slow lets a replayed release report a false [`Error::LockLost`] more
    /// often (see [`reconnect_policy`]).
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

    /// The lease of a lock taken without [`LockOptions::lease`](crate::LockOptions::lease). The
    /// watchdog renews it at a third of the lease while the guard lives (see
    /// [`LockOptions::watchdog`](crate::LockOptions::watchdog)). Default 30 s.
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
    /// Default 500 ms. Zero unsubscribes at once; at most
    /// [`MAX_DURATION`](Self::MAX_DURATION).
    pub fn unsubscribe_linger(mut self, linger: Duration) -> Self {
        self.unsubscribe_linger = linger;
        self
    }

    /// Release messages fred buffers for the subscriber task before it counts
    /// as lagging (then every waiter re-checks). Default 1024, between 1 and
    /// [`MAX_MESSAGE_BUFFER`](Self::MAX_MESSAGE_BUFFER).
    pub fn message_buffer(mut self, messages: usize) -> Self {
        self.message_buffer = messages;
        self
    }

    /// How many extra connections serve acquisitions with
    /// [`LockOptions::min_replicas`](crate::LockOptions::min_replicas). `WAIT` blocks its connection until the
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
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificates_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_roots = Some(pem.into());
        self
    }

    /// How long a lock's bookkeeping outlives its last use: a released
    /// lock's value (its tombstone: the last fencing token, the recently
    /// released tokens), a lapsed reservation, and the markers of abandoned
    /// acquisitions. Within this window
    /// a replayed release is recognised as ours and a server clock stepping
    /// back cannot make fencing tokens go backwards; past it, nothing of the
    /// lock stays in Redis. Default 60 s
    /// (the same as the side keys' retention), between
    /// 1 s and 1 day. Every client of one prefix should use the same value.
    pub fn side_retention(mut self, retention: Duration) -> Self {
        self.side_retention = retention;
        self
    }

    /// What `build` does when a server may evict relaylock's values: a
    /// `maxmemory` limit with any `maxmemory-policy` but `noeviction` (every
    /// value relaylock writes has a TTL, so even the `volatile-*` policies
    /// may pick it). An evicted lock lets a second holder in, an evicted
    /// semaphore more holders than its limit. Default
    /// [`OnEvictingServer::Warn`]: a `tracing` warning naming the server and
    /// its policy, once per server and policy. [`OnEvictingServer::Refuse`]:
    /// `build` fails with [`Error::EvictingServer`], or
    /// [`Error::EvictionUnknown`] when the setting cannot be read.
    ///
    /// `build` reads every primary's setting (each of a cluster, the one a
    /// Sentinel names) with `CONFIG GET maxmemory*`, or `INFO memory` where
    /// an ACL refuses `CONFIG`; and the client reads it again for every
    /// server it connects to later (a failover, a restart), logging what it
    /// finds (at `ERROR` level with `Refuse`, which a running client can no
    /// longer act on). See [`eviction`](crate::eviction).
    ///
    /// ```no_run
    /// # async fn demo() -> relaylock::Result<()> {
    /// use relaylock::{Error, LockClient, OnEvictingServer};
    ///
    /// match LockClient::builder()
    ///     .on_evicting_server(OnEvictingServer::Refuse)
    ///     .build()
    ///     .await
    /// {
    ///     Err(Error::EvictingServer { server, policy, .. }) => {
    ///         eprintln!("{server} runs maxmemory-policy {policy}: not safe for locks");
    ///     }
    ///     other => drop(other?),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn on_evicting_server(mut self, on_evicting: OnEvictingServer) -> Self {
        self.on_evicting = on_evicting;
        self
    }

    /// The client's name, for operators: `relaylock status` and
    /// [`LockClient::inspect`](crate::LockClient::inspect) show it beside
    /// every hold, reservation and queue entry of this client (with when
    /// the client started), also after its process died. Default
    /// `<host>:<pid>`. At most 256 bytes. It costs one `SET` at `build` (and
    /// every 12 hours), never anything per acquisition: a lock's token
    /// starts with the client's id, which leads to the name.
    ///
    /// ```no_run
    /// # async fn demo() -> relaylock::Result<()> {
    /// let client = relaylock::LockClient::builder()
    ///     .name(format!("billing-worker@{}", std::env::var("POD_NAME").unwrap_or_default()))
    ///     .build()
    ///     .await?;
    /// # drop(client); Ok(()) }
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Every setting against its limits (nothing is sent yet).
    fn validate(&self) -> Result<()> {
        validate_prefix(&self.prefix)?;
        validate_lease(self.default_lease).map_err(|e| match e {
            Error::InvalidArgument(m) => Error::InvalidArgument(format!(
                "default_lease: {m} (between 1 ms and {MAX_LEASE:?})"
            )),
            e => e,
        })?;
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
            if d < Duration::from_millis(1) || d > Self::MAX_DURATION {
                return Err(Error::InvalidArgument(format!(
                    "{what} {d:?} must be between 1 ms and 1 h"
                )));
            }
        }
        if self.unsubscribe_linger > Self::MAX_DURATION {
            return Err(Error::InvalidArgument(format!(
                "unsubscribe_linger {:?} must be at most 1 h",
                self.unsubscribe_linger
            )));
        }
        if !(1..=Self::MAX_MESSAGE_BUFFER).contains(&self.message_buffer) {
            return Err(Error::InvalidArgument(format!(
                "message_buffer {} must be between 1 and {}",
                self.message_buffer,
                Self::MAX_MESSAGE_BUFFER
            )));
        }
        if self.side_retention < Duration::from_secs(1) || self.side_retention > MAX_LEASE {
            return Err(Error::InvalidArgument(format!(
                "side_retention {:?} must be between 1 s and 1 day",
                self.side_retention
            )));
        }
        if let Some(name) = &self.name {
            if name.len() > crate::identity::MAX_NAME || name.chars().any(char::is_control) {
                return Err(Error::InvalidArgument(format!(
                    "name must be at most {} bytes, without control characters",
                    crate::identity::MAX_NAME
                )));
            }
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
        Ok(())
    }

    /// The command client (built, or the one passed in; whether relaylock
    /// owns it) and the builder the other connections are made with.
    fn command_client(&self) -> Result<(Client, bool, Builder)> {
        let (redis, owns_redis, builder) = match self.fred_client.clone() {
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
                        .unwrap_or_else(reconnect_policy),
                );
                (client, false, builder)
            }
            None => {
                #[allow(unused_mut)]
                let mut config = match self.fred_config.clone() {
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
                    .set_policy(reconnect_policy());
                bound_commands(&mut builder, self.command_timeout, self.message_buffer);
                (builder.build()?, true, builder)
            }
        };
        Ok((redis, owns_redis, builder))
    }

    /// What [`build`](Self::build) does: check the settings, connect both
    /// connections, load the scripts and start the subscriber and watchdog
    /// tasks; the state every clone of the client will share.
    pub(crate) async fn connect_client(self) -> Result<Arc<ClientInner>> {
        self.validate()?;
        let (redis, owns_redis, builder) = self.command_client()?;
        let subscriber = builder.build_subscriber_client()?;
        // Dropped before `build` completes (its future cancelled, or an
        // error below), this closes the connections it opened.
        let opened = Opened {
            redis: owns_redis.then(|| redis.clone()),
            subscriber: Some(subscriber.clone()),
        };
        // On an error, `opened` closes what was opened, in the background.
        self.connect(&redis, &subscriber).await?;
        let scripts = self.load_and_check(&redis, &subscriber, owns_redis).await?;
        let sharded = sharded_pubsub(&redis);
        crate::metrics::describe();
        let identity = self.identity();
        let background = TaskTracker::new();
        let publish = if sharded { "SPUBLISH" } else { "PUBLISH" };
        let calls = Calls::new(
            redis.clone(),
            scripts,
            self.command_timeout,
            self.side_retention.as_millis() as u64,
            publish,
        );
        let registry = Arc::new(Registry::new(
            subscriber.clone(),
            calls.clone(),
            identity.id.clone(),
            self.unsubscribe_linger,
            self.command_timeout,
            sharded,
            background.clone(),
        ));
        let watchdog = Watchdog::new(calls.clone(), self.default_lease);
        // Before any task is spawned (dropped here, `build` leaves none).
        let control = self
            .announce(&redis, &subscriber, &identity, sharded, &watchdog)
            .await;
        let observers = Arc::clone(&control.observers);
        let watchdog_task = watchdog::spawn(&watchdog);
        let subscriber_task = crate::subscriber::spawn(
            &subscriber,
            &redis,
            Arc::clone(&registry),
            control,
            self.command_timeout,
        );
        let identity_task =
            identity::spawn_refresh(&redis, &self.prefix, identity.clone(), self.command_timeout);
        let eviction_task = eviction::spawn_watch(
            calls.redis(),
            self.on_evicting == OnEvictingServer::Refuse,
            self.command_timeout,
        );
        opened.keep();
        Ok(Arc::new(ClientInner {
            calls,
            registry,
            observers,
            watchdog,
            replicas: Replicas::new(builder, self.replica_connections, self.connect_timeout),
            identity,
            prefix: self.prefix,
            default_lease: self.default_lease,
            strategy: self.wait_strategy,
            command_timeout: self.command_timeout,
            tasks: Tasks {
                subscriber,
                subscriber_task,
                watchdog_task,
                eviction_task,
                identity_task,
                owns_redis,
            },
            closing: Closing::default(),
            background,
            shut_down: tokio::sync::OnceCell::new(),
        }))
    }
}

impl LockClientBuilder {
    /// Connect both connections at once, within one connect timeout: a
    /// deadline for `build`'s connecting, not one per connection.
    async fn connect(&self, redis: &Client, subscriber: &SubscriberClient) -> Result<()> {
        let connected = async {
            if redis.is_connected() {
                Ok(())
            } else {
                connect_within(redis, self.connect_timeout).await
            }
        };
        let (commands, subscribed) =
            tokio::join!(connected, connect_within(subscriber, self.connect_timeout));
        commands.and(subscribed)
    }

    /// Load the scripts and check the servers' eviction setting; on an
    /// error, close both connections (the command connection only when
    /// relaylock opened it) before returning it.
    async fn load_and_check(
        &self,
        redis: &Client,
        subscriber: &SubscriberClient,
        owns_redis: bool,
    ) -> Result<Scripts> {
        let scripts = Scripts::new();
        let loaded = async {
            scripts.acquire.load(redis).await?;
            scripts.release.load(redis).await?;
            scripts.renew.load(redis).await?;
            scripts.peek.load(redis).await?;
            scripts.leave.load(redis).await
        };
        let checked = async {
            with_timeout(self.command_timeout, loaded).await?;
            self.check_eviction(redis).await
        };
        if let Err(e) = checked.await {
            let _ = tokio::time::timeout(self.connect_timeout, subscriber.quit()).await;
            if owns_redis {
                let _ = tokio::time::timeout(self.connect_timeout, redis.quit()).await;
            }
            return Err(e);
        }
        Ok(scripts)
    }

    /// A new client's identity: a fresh id, 16 hex digits of a random UUID
    /// (unique among the clients of a lock with overwhelming probability,
    /// short in the lock's queue and messages), and its name.
    fn identity(&self) -> Identity {
        let id = uuid::Uuid::new_v4().simple().to_string()[..16].to_owned();
        Identity::new(id, self.name.clone().unwrap_or_else(identity::default_name))
    }

    /// Who this client is, for operators, and its control channel, before
    /// the first lock: write its record and subscribe the channel, where
    /// `u:<token>` (an operator released that hold) makes the watchdog
    /// check the hold now.
    async fn announce(
        &self,
        redis: &Client,
        subscriber: &SubscriberClient,
        identity: &Identity,
        sharded: bool,
        watchdog: &Arc<Watchdog>,
    ) -> crate::subscriber::Control {
        identity::record(redis, &self.prefix, identity, self.command_timeout).await;
        let watchdog = Arc::clone(watchdog);
        let control = crate::subscriber::Control {
            channel: identity::control_channel(&self.prefix, &identity.id),
            sharded,
            on_message: Arc::new(move |message: &str| {
                if let Some(token) = message.strip_prefix("u:") {
                    watchdog.verify(token);
                }
            }),
            observers: Arc::new(Observers::default()),
        };
        control.subscribe(subscriber, self.command_timeout).await;
        control
    }

    /// Read every primary's eviction setting (within the command timeout),
    /// warn about each server that may evict, and refuse with
    /// [`OnEvictingServer::Refuse`].
    async fn check_eviction(&self, redis: &Client) -> Result<()> {
        let refuse = self.on_evicting == OnEvictingServer::Refuse;
        let servers = eviction::read_within(redis, Some(self.command_timeout)).await;
        for memory in &servers {
            if refuse {
                if let Some(e) = eviction::refusal(memory) {
                    return Err(e);
                }
            } else {
                eviction::warn_once(memory, false);
            }
        }
        Ok(())
    }
}

/// Whether to use sharded pub/sub (SSUBSCRIBE, SPUBLISH): in Redis Cluster,
/// to keep each release message within the lock's shard. It needs Redis 7;
/// an older cluster falls back to PUBLISH/SUBSCRIBE, with a warning.
fn sharded_pubsub(redis: &Client) -> bool {
    let clustered = redis.is_clustered();
    let sharded = clustered && redis.server_version().is_some_and(|v| v.major >= 7);
    if clustered && !sharded {
        tracing::warn!(
            version = ?redis.server_version(),
            "relaylock: Redis Cluster without sharded pub/sub (needs Redis 7): falling back to PUBLISH/SUBSCRIBE, which broadcasts every release to every node"
        );
    }
    sharded
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

/// The reconnect policy relaylock gives the connections it opens: reconnect
/// forever, the first attempt 1 ms after a drop, then after 2, 4, 8, ...,
/// 1024 ms, then every 2 s (9 attempts in the first second). Up to 10 ms of
/// jitter is added to each delay below 2 s.
///
/// A client passed to [`LockClientBuilder::fred_client`] keeps its own
/// policy; give it this one to get the same behaviour:
///
/// ```no_run
/// # async fn demo() -> relaylock::Result<()> {
/// use fred::prelude::*;
///
/// let redis = Builder::from_config(Config::from_url("redis://127.0.0.1:6379")?)
///     .set_policy(relaylock::reconnect_policy())
///     .build()?;
/// let locks = relaylock::LockClient::builder().fred_client(redis).build().await?;
/// # drop(locks); Ok(()) }
/// ```
///
/// The first attempt is quick because fred resends the commands that were
/// in flight only once it has reconnected, and a replayed release is
/// recognised by the release ring only while fewer than 32 other releases
/// of its key came in between (docs/design.md, "Release"). fred's usual
/// first delay (50 ms plus up to 100 ms of jitter) let two clients trading
/// a key turn the ring over first: 5 to 14 false [`Error::LockLost`] per
/// 10 lost replies, for locks and permits alike, and none with this policy
/// (`releases_replayed_under_load_are_not_false_losses` and its permit
/// twin check it).
///
/// The small jitter keeps that window short; it also means many processes
/// that lost their connections together reconnect within a few tens of
/// milliseconds of each other. A large fleet that prefers to spread them
/// out can pass its own client with more jitter.
pub fn reconnect_policy() -> ReconnectPolicy {
    let mut policy = ReconnectPolicy::new_exponential(0, 1, 2_000, 2);
    policy.set_jitter(10);
    policy
}

/// The connections `build` opened, closed in the background when dropped
/// unless [`keep`](Opened::keep) was called (the client took them over).
struct Opened {
    redis: Option<Client>,
    subscriber: Option<fred::clients::SubscriberClient>,
}

impl Opened {
    fn keep(mut self) {
        self.redis = None;
        self.subscriber = None;
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        let (redis, subscriber) = (self.redis.take(), self.subscriber.take());
        if redis.is_none() && subscriber.is_none() {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let limit = Duration::from_secs(5);
                if let Some(subscriber) = subscriber {
                    let _ = tokio::time::timeout(limit, subscriber.quit()).await;
                }
                if let Some(redis) = redis {
                    let _ = tokio::time::timeout(limit, redis.quit()).await;
                }
            });
        }
    }
}
