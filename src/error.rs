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
///         Error::Timeout { .. } => "busy, try later",
///         Error::Unavailable { .. } => "Redis is down",
///         Error::LockLost { .. } => "someone else may have run the critical section",
///         Error::InvalidArgument(_) => "bug in the caller",
///         _ => "infrastructure problem",
///     }
/// }
/// let e = Error::Timeout { key: "orders:42".into() };
/// assert_eq!(describe(&e), "busy, try later");
/// assert_eq!(e.to_string(), "timed out waiting for the lock on orders:42");
/// ```
///
/// Every message is a sentence for a person: it names the key or the
/// server, and a cause from Redis or the operating system is said once,
/// in the message, not again as [`source`](std::error::Error::source)
/// (so a reporter that prints the chain prints it once).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The caller's wait deadline ([`LockOptions::wait`](crate::LockOptions::wait))
    /// passed before the lock could be taken.
    #[error("timed out waiting for the lock on {key}")]
    Timeout {
        /// The key, as given to the call.
        key: String,
    },
    /// The caller's wait deadline passed while Redis could not be reached:
    /// the command connection was down, or a try of the call had been out
    /// 50 ms or more without an answer (a server that stopped answering, a
    /// network that drops everything). A wait shorter than a round trip
    /// ends in [`Timeout`](Self::Timeout). The tries were bounded by the deadline, so none of them
    /// runs later; nothing was left behind.
    #[error("Redis at {server} could not be reached before the wait for {key} ended ({waited:?})")]
    Unavailable {
        /// The key, as given to the call.
        key: String,
        /// Where the connection goes: `host:port`, comma-separated when the
        /// configuration names several servers.
        server: String,
        /// How long the call waited.
        waited: Duration,
    },
    /// The lock is no longer held by this guard: its lease expired (and another
    /// owner may have taken it), or the key was deleted or overwritten.
    #[error("the lock on {key} is no longer held by this guard (its lease ran out, or the key was deleted or replaced)")]
    LockLost {
        /// The key, as given to the call that took it.
        key: String,
    },
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
    /// connect timeout: a deadline for the whole connection, handshake and
    /// authentication included.
    #[error("could not connect to Redis at {server} within {timeout:?}")]
    ConnectTimeout {
        /// Where the connection went: `host:port`, comma-separated when the
        /// configuration names several servers.
        server: String,
        /// The connect timeout.
        timeout: Duration,
    },
    /// The first connection to Redis failed: refused, unreachable, a TLS
    /// handshake or the authentication failed. `server` names where it went
    /// (`host:port`, several for a cluster or Sentinel); `error` is the
    /// Redis client's error, whose reason the message gives.
    #[error("could not connect to Redis at {server}: {}", readable(.error))]
    Connect {
        /// Where the connection went: `host:port`, comma-separated when the
        /// configuration names several servers.
        server: String,
        /// The Redis client's error.
        error: fred::error::Error,
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
    /// A server may evict relaylock's values (a `maxmemory` limit with a
    /// `maxmemory-policy` other than `noeviction`), and the client was
    /// built with [`OnEvictingServer::Refuse`](crate::eviction::OnEvictingServer::Refuse).
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
    /// built with [`OnEvictingServer::Refuse`](crate::eviction::OnEvictingServer::Refuse).
    #[error("could not read whether Redis at {server} may evict relaylock's keys: {reason}")]
    EvictionUnknown {
        /// The server, `host:port`.
        server: String,
        /// What each command answered.
        reason: String,
    },
    /// An error reported by the Redis client (`fred`): connection loss, command
    /// timeout, a server error reply. A command that ran out of time arrives
    /// here with [`ErrorKind::Timeout`](fred::error::ErrorKind::Timeout),
    /// whether fred's own timeout or relaylock's bound (for a `fred_client`
    /// without one) caught it; the command may still have run in Redis.
    #[error("redis: {}", readable(.0))]
    Redis(fred::error::Error),
}

impl From<fred::error::Error> for Error {
    fn from(e: fred::error::Error) -> Self {
        Error::Redis(e)
    }
}

/// A fred error as a person reads it: what went wrong, and the operating
/// system's own words for an I/O error (fred keeps those as the `Debug`
/// text of `std::io::Error`, `Os { code: 111, kind: ConnectionRefused,
/// message: "Connection refused" }`), never `Debug` output.
pub(crate) fn readable(e: &fred::error::Error) -> String {
    use fred::error::ErrorKind as K;
    let details = e.details();
    let reason = match details.find("message: \"") {
        Some(at) => {
            let rest = &details[at + 10..];
            rest.split('"').next().unwrap_or(rest).to_lowercase()
        }
        None if details.starts_with("Custom {") => {
            // An io::Error with an inner error (a DNS failure, a TLS
            // certificate): that error's own text, else its kind in words.
            match details.split_once("error: ") {
                Some((_, inner)) => {
                    let inner = inner.trim_end_matches('}').trim_end();
                    inner.trim_matches('"').to_owned()
                }
                None => words(
                    details
                        .trim_start_matches("Custom { kind: ")
                        .split([',', ' '])
                        .next()
                        .unwrap_or(""),
                ),
            }
        }
        None if details.starts_with("Kind(") => {
            // An io::Error without an OS message: its kind, in words.
            words(details.trim_start_matches("Kind(").trim_end_matches(')'))
        }
        None => details.trim_end_matches('.').to_owned(),
    };
    let what = match e.kind() {
        K::IO => "I/O error",
        K::Timeout => "timed out",
        K::Auth => "authentication failed",
        K::Config | K::Url => "configuration error",
        K::Canceled => "canceled",
        K::Protocol => "protocol error",
        K::Cluster => "cluster error",
        K::Sentinel => "Sentinel error",
        K::Routing => "routing error",
        K::Backpressure => "too many commands queued",
        K::Parse => "could not parse the reply",
        // A server's error reply ("NOPERM ...", "ERR ...") says it all.
        _ => "",
    };
    match (what, reason.is_empty()) {
        ("", _) => reason,
        (what, true) => what.to_owned(),
        (what, false) => format!("{what}: {reason}"),
    }
}

/// `ConnectionRefused` as `connection refused`.
fn words(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            out.push(' ');
        }
        out.extend(c.to_lowercase());
    }
    out
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
pub(crate) async fn connect_within<C: fred::interfaces::ClientLike + Clone + 'static>(
    client: &C,
    timeout: Duration,
) -> Result<()> {
    let outcome = tokio::time::timeout(timeout, client.init()).await;
    let server = servers(&client.client_config());
    let error = match outcome {
        Ok(Ok(_task)) => return Ok(()),
        Ok(Err(error)) => Error::Connect { server, error },
        Err(_) => Error::ConnectTimeout { server, timeout },
    };
    // Stop its reconnect loop in the background: the deadline is the
    // caller's, not this clean-up's.
    let client = client.clone();
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(1), client.quit()).await;
        });
    }
    Err(error)
}

/// The servers a configuration names, `host:port` each, comma-separated.
pub(crate) fn servers(config: &fred::types::config::Config) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::{Error as Fred, ErrorKind};

    #[test]
    fn fred_errors_read_as_words() {
        let io = |e: std::io::Error| readable(&Fred::from(e));
        assert_eq!(
            io(std::io::Error::from_raw_os_error(111)),
            "I/O error: connection refused"
        );
        assert_eq!(
            io(std::io::Error::other(
                "failed to lookup address information: Name or service not known"
            )),
            "I/O error: failed to lookup address information: Name or service not known"
        );
        assert_eq!(
            io(std::io::Error::from(std::io::ErrorKind::TimedOut)),
            "I/O error: timed out"
        );
        assert_eq!(
            readable(&Fred::new(ErrorKind::Timeout, "Request timed out.")),
            "timed out: Request timed out"
        );
        assert_eq!(
            readable(&Fred::new(
                ErrorKind::Unknown,
                "NOPERM this user has no permissions"
            )),
            "NOPERM this user has no permissions"
        );
    }
}
