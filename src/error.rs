//! The one error type of the crate.

use std::time::Duration;

/// Everything that can go wrong when taking, extending or releasing a lock.
///
/// The enum is `#[non_exhaustive]`: match the variants you handle and keep a
/// wildcard arm for the rest.
///
/// ```
/// use relaylock::Error;
///
/// fn describe(e: &Error) -> &'static str {
///     match e {
///         Error::Timeout => "busy, try later",
///         Error::LockLost => "someone else may have run the critical section",
///         Error::InvalidArgument(_) => "bug in the caller",
///         _ => "infrastructure problem",
///     }
/// }
/// assert_eq!(describe(&Error::Timeout), "busy, try later");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller's wait deadline passed before the lock could be taken.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// The lock is no longer held by this guard: its lease expired (and another
    /// owner may have taken it), or the key was deleted or overwritten.
    #[error("the lock is no longer held by this guard (lease expired or key replaced)")]
    LockLost,
    /// An argument was rejected before anything was sent to Redis: an empty or
    /// over-long key, a zero or over-long lease, a malformed URL or prefix.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Fewer replicas than
    /// [`LockOptions::min_replicas`](crate::LockOptions::min_replicas) asked
    /// for acknowledged the acquisition in time. `acked` is 0 also when an
    /// acknowledgement could not be attributed to this lock: the connection
    /// changed between the lock's write and `WAIT` (a reconnect or a
    /// failover: the count could be another server's), or the server that
    /// connection reached did not hold this acquisition. The lock was
    /// released (or, if even that failed, expires with its lease).
    #[error("only {acked} of {required} replicas acknowledged the lock in time (0 also when the acknowledgement could not be attributed to this lock); it was released")]
    NotReplicated {
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas asked for.
        required: u32,
    },
    /// The first connection to Redis did not succeed within the configured
    /// connect timeout.
    #[error("could not connect to Redis within {0:?}")]
    ConnectTimeout(Duration),
    /// The first connection to Redis failed: refused, unreachable, a TLS
    /// handshake or the authentication failed. `server` names where it went
    /// (`host:port`, several for a cluster or Sentinel); `source` is the
    /// Redis client's error.
    #[error("could not connect to Redis at {server}: {source}")]
    Connect {
        /// Where the connection went: `host:port`, comma-separated when the
        /// configuration names several servers.
        server: String,
        /// The Redis client's error.
        #[source]
        source: fred::error::Error,
    },
    /// A server may evict relaylock's values (a `maxmemory` limit with a
    /// `maxmemory-policy` other than `noeviction`), and the client was
    /// built with [`OnEvictingServer::Refuse`](crate::OnEvictingServer::Refuse).
    /// An evicted lock lets a second holder in.
    #[error("Redis at {server} may evict relaylock's keys (maxmemory {maxmemory} bytes, maxmemory-policy {policy}); set maxmemory-policy noeviction")]
    EvictingServer {
        /// The server, `host:port`.
        server: String,
        /// Its `maxmemory-policy`.
        policy: String,
        /// Its `maxmemory`, in bytes.
        maxmemory: u64,
    },
    /// Whether a server may evict relaylock's values could not be read
    /// (its ACL refuses both `CONFIG GET` and `INFO`), and the client was
    /// built with [`OnEvictingServer::Refuse`](crate::OnEvictingServer::Refuse).
    #[error("could not read whether Redis at {server} may evict relaylock's keys: {reason}")]
    EvictionUnknown {
        /// The server, `host:port`.
        server: String,
        /// What each command answered.
        reason: String,
    },
    /// Redis answered something the scripts never return: a sign that the key
    /// is used by something other than relaylock, or of a version mismatch.
    #[error("unexpected reply from Redis: {0}")]
    UnexpectedReply(String),
    /// The client was shut down with
    /// [`LockClient::shutdown`](crate::LockClient::shutdown): every call
    /// made on any of its clones after the shutdown began fails with this,
    /// and so do the guards it released (`release`, `extend`).
    #[error("the lock client was shut down")]
    Shutdown,
    /// An error reported by the Redis client (`fred`): connection loss, command
    /// timeout, a server error reply. A command that ran out of time arrives
    /// here with [`ErrorKind::Timeout`](fred::error::ErrorKind::Timeout),
    /// whether fred's own timeout or relaylock's bound (for a `fred_client`
    /// without one) caught it; the command may still have run in Redis.
    #[error("redis: {0}")]
    Redis(#[from] fred::error::Error),
}

/// Shorthand for `Result<T, relaylock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Await a fred command for at most `limit`; past it, fail with fred's own
/// `Timeout` error kind (the command may still run in Redis).
pub(crate) async fn with_timeout<T>(
    limit: Duration,
    command: impl std::future::Future<Output = Result<T, fred::error::Error>>,
) -> Result<T, fred::error::Error> {
    tokio::time::timeout(limit, command)
        .await
        .unwrap_or_else(|_| Err(timed_out()))
}

/// The error of a command relaylock's own timer cut short.
pub(crate) fn timed_out() -> fred::error::Error {
    fred::error::Error::new(
        fred::error::ErrorKind::Timeout,
        "relaylock: command timed out",
    )
}

/// Connect `client`, or give up after `timeout` (then stop its reconnect
/// loop) with [`Error::ConnectTimeout`], or [`Error::Connect`] with the
/// connection error.
pub(crate) async fn connect_within<C: fred::interfaces::ClientLike>(
    client: &C,
    timeout: Duration,
) -> Result<()> {
    let outcome = tokio::time::timeout(timeout, client.init()).await;
    let error = match outcome {
        Ok(Ok(_task)) => return Ok(()),
        Ok(Err(e)) => Error::Connect {
            server: servers(&client.client_config()),
            source: e,
        },
        Err(_) => Error::ConnectTimeout(timeout),
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
    Err(error)
}

/// The servers a configuration names, `host:port` each, comma-separated.
fn servers(config: &fred::types::config::Config) -> String {
    let hosts = config.server.hosts();
    if hosts.is_empty() {
        return "(no server configured)".into();
    }
    hosts
        .iter()
        .map(|s| format!("{}:{}", s.host, s.port))
        .collect::<Vec<_>>()
        .join(",")
}
