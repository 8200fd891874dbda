//! Per-call options, the wait strategy, and the limits every argument is
//! checked against before anything is sent to Redis.

use std::time::Duration;

use metrics::SharedString;

use crate::error::{Error, Result};

pub use crate::state::limits::{MAX_KEY_LEN, MAX_LEASE, MAX_PREFIX_LEN};

/// How a waiting task learns that a lock may be free.
///
/// ```
/// use std::time::Duration;
/// use relaylock::WaitStrategy;
///
/// assert_eq!(WaitStrategy::default(), WaitStrategy::PubSub);
/// let baseline = WaitStrategy::Poll(Duration::from_millis(10));
/// assert_ne!(baseline, WaitStrategy::PubSub);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WaitStrategy {
    /// Sleep until a release message arrives on the lock's channel, the
    /// holder's remaining lease runs out, or the subscriber reconnects. One
    /// retry per release per process. The default.
    #[default]
    PubSub,
    /// Retry every interval (spin polling). The baseline the load test
    /// compares against; every waiter costs Redis one script call per interval.
    /// Polling callers do not join the queue of waiting clients, so next to
    /// `PubSub` clients contending for the same key they only get the lock
    /// when no such client is queued.
    Poll(Duration),
}

/// Options of one lock call.
///
/// A lock taken without [`lease`](Self::lease) is held with the client's
/// default lease and renewed by the watchdog while its guard lives. A lock
/// with an explicit lease keeps it fixed, unless
/// [`watchdog(true)`](Self::watchdog) asks for renewal of that lease too.
///
/// ```
/// use std::time::Duration;
/// use relaylock::LockOptions;
///
/// let opts = LockOptions::default()
///     .wait(Duration::from_secs(2))      // give up with Error::Timeout after 2 s
///     .lease(Duration::from_secs(10))    // the key expires 10 s after acquisition
///     .name("orders");                   // bounded metrics label
/// assert_eq!(opts.wait_limit(), Some(Duration::from_secs(2)));
/// ```
#[derive(Clone, Debug, Default)]
pub struct LockOptions {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) name: Option<SharedString>,
    pub(crate) watchdog: Option<bool>,
    pub(crate) replicas: Option<(u32, Duration)>,
}

impl LockOptions {
    /// Give up with [`Error::Timeout`] when the lock is not acquired within
    /// `wait`, or with [`Error::Unavailable`] when Redis could not be reached
    /// meanwhile. It is a deadline for the whole call, whatever Redis does:
    /// each try is bounded by what is left of it (a try that runs out is
    /// never sent later), and what a cut-off try may have taken is released
    /// in the background. A `min_replicas` check after the lock was taken
    /// keeps its own timeout. `Duration::ZERO` means a single try (bounded
    /// by the command timeout, as `try_lock`); a wait shorter than a round
    /// trip can end before any reply.
    /// Without it, a lock call waits as long as it takes. A wait too long to
    /// represent as a deadline is treated as no deadline.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// The lease: how long the key lives if the holder never releases it.
    /// Defaults to the client's [`default_lease`](crate::LockClientBuilder::default_lease).
    /// Must be at least 1 ms and at most [`MAX_LEASE`]. An explicit lease is
    /// fixed: the lock expires `lease` after acquisition unless extended
    /// (set [`watchdog(true)`](Self::watchdog) to have it renewed).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// A bounded name for this kind of lock, attached as the `name` label of
    /// every metric this call records. Never pass the raw key when keys are
    /// unbounded (per-user, per-order).
    pub fn name(mut self, name: impl Into<SharedString>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Whether the client's watchdog renews the lease while the guard lives,
    /// at a third of the lease, and fires [`LockGuard::lost`](crate::LockGuard::lost)
    /// when a renewal finds the lock gone or cannot reach Redis before the
    /// lease runs out. Default: renewed when no explicit
    /// [`lease`](Self::lease) is set, fixed otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use relaylock::LockOptions;
    ///
    /// // A 5 s lease, renewed every ~1.7 s for as long as the guard lives.
    /// let opts = LockOptions::default().lease(Duration::from_secs(5)).watchdog(true);
    /// # let _ = opts;
    /// ```
    pub fn watchdog(mut self, renew: bool) -> Self {
        self.watchdog = Some(renew);
        self
    }

    /// After acquiring, wait until at least `replicas` replicas acknowledged
    /// the lock's write (Redis `WAIT`), for at most `timeout`. When fewer
    /// acknowledge in time, the lock is released and the call fails with
    /// [`Error::NotReplicated`](crate::Error::NotReplicated), so a failover
    /// right after acquisition cannot silently drop a lock that was reported
    /// taken. An acknowledgement is only counted from the connection that
    /// wrote the lock, on a server that holds this acquisition: otherwise
    /// (a reconnect or failover in between) the call fails the same way,
    /// with 0 acknowledged. If `WAIT` itself fails (a connection error),
    /// the lock is released too and the call returns that error.
    /// `replicas` must be at least 1, `timeout` at least 1 ms and at
    /// most half the lock's lease (the lease runs while `WAIT` waits).
    ///
    /// `WAIT` blocks the connection it runs on, so such acquisitions run on a
    /// small pool of extra connections the client opens on first use (see
    /// [`replica_connections`](crate::LockClientBuilder::replica_connections)),
    /// never on the connection other locks use.
    ///
    /// ```
    /// use std::time::Duration;
    /// use relaylock::LockOptions;
    ///
    /// let opts = LockOptions::default().min_replicas(1, Duration::from_millis(100));
    /// # let _ = opts;
    /// ```
    pub fn min_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// The wait limit set with [`wait`](Self::wait), if any.
    pub fn wait_limit(&self) -> Option<Duration> {
        self.wait
    }
}

/// Options of one semaphore call: how many permits, and the options a lock
/// call has (wait limit, lease, watchdog, metrics name, replicas).
///
/// ```
/// use std::time::Duration;
/// use relaylock::SemaphoreOptions;
///
/// let opts = SemaphoreOptions::default()
///     .permits(2)                         // two permits at once, atomically
///     .wait(Duration::from_secs(1))       // Error::Timeout after 1 s
///     .lease(Duration::from_secs(30))     // a crashed holder's permits come back after 30 s
///     .name("payments");
/// assert_eq!(opts.permit_count(), 2);
/// ```
#[derive(Clone, Debug)]
pub struct SemaphoreOptions {
    pub(crate) permits: u32,
    pub(crate) lock: LockOptions,
}

impl Default for SemaphoreOptions {
    fn default() -> Self {
        SemaphoreOptions {
            permits: 1,
            lock: LockOptions::default(),
        }
    }
}

impl SemaphoreOptions {
    /// How many permits to take at once (all or none). Default 1. At least
    /// 1 and at most the semaphore's limit, else the call fails with
    /// [`Error::InvalidArgument`].
    pub fn permits(mut self, n: u32) -> Self {
        self.permits = n;
        self
    }

    /// As [`LockOptions::wait`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.lock = self.lock.wait(wait);
        self
    }

    /// As [`LockOptions::lease`]: how long the hold lives if never released
    /// or renewed (by the server clock). An explicit lease is fixed unless
    /// [`watchdog(true)`](Self::watchdog).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lock = self.lock.lease(lease);
        self
    }

    /// As [`LockOptions::name`].
    pub fn name(mut self, name: impl Into<SharedString>) -> Self {
        self.lock = self.lock.name(name);
        self
    }

    /// As [`LockOptions::watchdog`].
    pub fn watchdog(mut self, renew: bool) -> Self {
        self.lock = self.lock.watchdog(renew);
        self
    }

    /// As [`LockOptions::min_replicas`].
    pub fn min_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.lock = self.lock.min_replicas(replicas, timeout);
        self
    }

    /// The number of permits set with [`permits`](Self::permits).
    pub fn permit_count(&self) -> u32 {
        self.permits
    }
}

/// Checks a `min_replicas` setting against the lock's lease; returns the
/// timeout in whole ms.
pub(crate) fn validate_replicas(replicas: u32, timeout: Duration, lease: Duration) -> Result<u64> {
    if replicas == 0 {
        return Err(Error::InvalidArgument(
            "min_replicas needs at least 1 replica".into(),
        ));
    }
    // WAIT with a timeout of 0 blocks forever: never send it.
    if timeout < Duration::from_millis(1) || timeout > Duration::from_secs(3600) {
        return Err(Error::InvalidArgument(format!(
            "min_replicas timeout {timeout:?} must be between 1 ms and 1 h"
        )));
    }
    // The lease runs while WAIT waits: a lock must not expire before its
    // caller even got it.
    if timeout > lease / 2 {
        return Err(Error::InvalidArgument(format!(
            "min_replicas timeout {timeout:?} must be at most half the lease {lease:?}"
        )));
    }
    Ok(timeout.as_millis() as u64)
}

pub(crate) fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("lock key is empty".into()));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidArgument(format!(
            "lock key is {} bytes, the limit is {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

/// Checks a lease and returns it in whole milliseconds (at least 1).
pub(crate) fn validate_lease(lease: Duration) -> Result<u64> {
    if lease.is_zero() {
        return Err(Error::InvalidArgument("lease is zero".into()));
    }
    if lease < Duration::from_millis(1) {
        return Err(Error::InvalidArgument(format!(
            "lease {lease:?} is under the 1 ms resolution of Redis expiry"
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::InvalidArgument(format!(
            "lease {lease:?} is longer than the maximum {MAX_LEASE:?}"
        )));
    }
    Ok(lease.as_millis() as u64)
}

/// Accepts the URL schemes relaylock supports in this build, before fred
/// parses the rest. Without the `tls` feature, `rediss://` is refused rather
/// than risk a connection without TLS.
pub(crate) fn validate_url_scheme(url: &str) -> Result<()> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::InvalidArgument(
            "invalid Redis URL: expected redis://host:port".into(),
        ));
    };
    let base = scheme
        .strip_suffix("-sentinel")
        .or_else(|| scheme.strip_suffix("-cluster"))
        .unwrap_or(scheme);
    match base {
        "redis" | "valkey" => Ok(()),
        "rediss" | "valkeys" if cfg!(feature = "tls") => Ok(()),
        "rediss" | "valkeys" => Err(Error::InvalidArgument(format!(
            "{scheme}:// needs TLS: build relaylock with the `tls` feature"
        ))),
        _ => Err(Error::InvalidArgument(format!(
            "unsupported URL scheme {scheme:?}: use redis://, redis-cluster:// or redis-sentinel://"
        ))),
    }
}

pub(crate) fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::InvalidArgument("prefix is empty".into()));
    }
    if prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::InvalidArgument(format!(
            "prefix is {} bytes, the limit is {MAX_PREFIX_LEN}",
            prefix.len()
        )));
    }
    if prefix.contains(['{', '}']) {
        return Err(Error::InvalidArgument(
            "prefix must not contain '{' or '}': the key is the cluster hash tag".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(matches!(validate_key(""), Err(Error::InvalidArgument(_))));
        assert!(validate_key("a").is_ok());
        assert!(validate_key(&"k".repeat(MAX_KEY_LEN)).is_ok());
        assert!(matches!(
            validate_key(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(validate_key("{braces} and spaces ü").is_ok());
    }

    #[test]
    fn leases() {
        assert!(matches!(
            validate_lease(Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            validate_lease(Duration::from_micros(999)),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(validate_lease(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(validate_lease(MAX_LEASE).unwrap(), 86_400_000);
        assert!(matches!(
            validate_lease(MAX_LEASE + Duration::from_millis(1)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            validate_lease(Duration::MAX),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn replicas() {
        let lease = Duration::from_secs(30);
        assert!(validate_replicas(0, Duration::from_secs(1), lease).is_err());
        assert!(validate_replicas(1, Duration::ZERO, lease).is_err());
        assert!(validate_replicas(1, Duration::from_micros(999), lease).is_err());
        assert!(validate_replicas(1, Duration::MAX, lease).is_err());
        assert!(validate_replicas(1, Duration::from_secs(16), lease).is_err());
        assert_eq!(
            validate_replicas(2, Duration::from_millis(250), lease).unwrap(),
            250
        );
    }

    #[test]
    fn url_schemes() {
        for ok in [
            "redis://h:1",
            "redis-sentinel://h:1",
            "valkey://h",
            "redis-cluster://h:1",
        ] {
            assert!(validate_url_scheme(ok).is_ok(), "{ok}");
        }
        let tls = ["rediss://h:1", "rediss-cluster://h:1"];
        for url in tls {
            assert_eq!(
                validate_url_scheme(url).is_ok(),
                cfg!(feature = "tls"),
                "{url}"
            );
        }
        for bad in ["", "h:1", "http://h:1", "redis+unix:///s"] {
            assert!(
                matches!(validate_url_scheme(bad), Err(Error::InvalidArgument(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn prefixes() {
        assert!(validate_prefix("relaylock").is_ok());
        assert!(validate_prefix("").is_err());
        assert!(validate_prefix("a{b").is_err());
        assert!(validate_prefix(&"p".repeat(MAX_PREFIX_LEN + 1)).is_err());
    }
}
