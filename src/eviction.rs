//! Whether a Redis server may evict relaylock's values.
//!
//! Every value relaylock writes carries a TTL (a lease, a tombstone's
//! retention), so every `maxmemory-policy` but `noeviction` may delete one
//! when the server reaches `maxmemory`: the `volatile-*` policies choose only
//! among keys with a TTL, the `allkeys-*` ones among all. An evicted lock
//! value lets a second client take a lock that is still held, and an evicted
//! semaphore lets more holders in than its limit (docs/design.md, "What the
//! safety argument assumes"). Nothing in the protocol can notice it: the
//! key is simply gone, as if its lease had ended.
//!
//! So [`LockClientBuilder::build`](crate::LockClientBuilder::build) reads
//! each primary's setting once (and again when a connection is made anew:
//! a Sentinel failover, a cluster node replaced), warns once per server and
//! policy, or refuses with
//! [`OnEvictingServer::Refuse`]. `relaylock status` prints the same warning.
//!
//! The setting is read with `CONFIG GET maxmemory*` (one command, Redis 6
//! and later, Valkey), or, where an ACL or a managed service refuses
//! `CONFIG`, from `INFO memory` (which has both fields since Redis 4).

use std::collections::HashSet;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::{ClientLike, EventInterface};
use fred::types::config::{Options, Server};
use fred::types::{CustomCommand, Value};

use crate::error::Error;

/// What [`build`](crate::LockClientBuilder::build) does when a server may
/// evict relaylock's values (its `maxmemory` is set and its
/// `maxmemory-policy` is not `noeviction`), or when that cannot be read.
/// Set with
/// [`LockClientBuilder::on_evicting_server`](crate::LockClientBuilder::on_evicting_server).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnEvictingServer {
    /// Log a `tracing` warning naming the server and its policy, once per
    /// server and policy in the process, and go on. A server whose setting
    /// cannot be read (an ACL that refuses both `CONFIG` and `INFO`) is
    /// warned about too. The default.
    #[default]
    Warn,
    /// Fail `build` with [`Error::EvictingServer`]
    /// when a server may evict, or
    /// [`Error::EvictionUnknown`] when its
    /// setting cannot be read: only servers known not to evict are used.
    /// A server met later (a failover to a primary that evicts) cannot
    /// undo a `build`: it is logged at `ERROR` level instead.
    Refuse,
}

/// One server's memory limit and eviction policy, as relaylock read them.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerMemory {
    /// The server, `host:port`.
    pub server: String,
    /// How the setting was read, or why it could not be.
    pub read: Read,
}

/// How a [`ServerMemory`] was read.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Read {
    /// Read with `CONFIG GET` (`from_config`) or from `INFO memory`.
    Read {
        /// `maxmemory` in bytes; 0 is no limit (nothing is ever evicted).
        maxmemory: u64,
        /// `maxmemory-policy`: `noeviction`, `volatile-lru`, ...
        policy: String,
        /// `true`: `CONFIG GET`; `false`: `INFO memory`.
        from_config: bool,
    },
    /// Neither command was allowed or understood; both errors, as the
    /// server gave them.
    Unknown(String),
}

impl ServerMemory {
    /// `Some(true)` when the server may evict relaylock's values: a
    /// `maxmemory` limit with a policy other than `noeviction`; `Some(false)`
    /// when it never does; `None` when the setting could not be read.
    pub fn may_evict(&self) -> Option<bool> {
        match &self.read {
            Read::Read {
                maxmemory, policy, ..
            } => Some(*maxmemory != 0 && policy != "noeviction"),
            Read::Unknown(_) => None,
        }
    }

    /// The warning relaylock logs for this server, `None` when it never
    /// evicts. `relaylock status` prints it above its table.
    pub fn warning(&self) -> Option<String> {
        match (&self.read, self.may_evict()) {
            (_, Some(false)) => None,
            (
                Read::Read {
                    maxmemory, policy, ..
                },
                _,
            ) => Some(format!(
                "Redis at {} may evict relaylock's keys (maxmemory {maxmemory} bytes, \
                 maxmemory-policy {policy}): an evicted lock lets a second holder in; \
                 set maxmemory-policy noeviction (docs/deployments.md)",
                self.server
            )),
            (Read::Unknown(why), _) => Some(format!(
                "could not read whether Redis at {} may evict relaylock's keys ({why}); \
                 it must run with maxmemory-policy noeviction (docs/deployments.md)",
                self.server
            )),
        }
    }
}

impl fmt::Display for ServerMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.read {
            Read::Read {
                maxmemory,
                policy,
                from_config,
            } => write!(
                f,
                "{}: maxmemory {maxmemory}, maxmemory-policy {policy} ({})",
                self.server,
                if *from_config {
                    "CONFIG GET"
                } else {
                    "INFO memory"
                }
            ),
            Read::Unknown(why) => write!(f, "{}: unknown ({why})", self.server),
        }
    }
}

/// Read the eviction setting of every primary `redis` is connected to (one
/// for a single server or Sentinel, each primary of a cluster, all at
/// once), sorted by server. Sends `CONFIG GET maxmemory*` to each, and
/// `INFO memory` where that fails; unbounded (callers add their timeout).
///
/// # Errors
///
/// None of its own: a server that refuses both commands is reported as
/// [`Read::Unknown`]. A connection error is reported there too.
///
/// # Cancel safety
///
/// Read-only: dropping the future leaves nothing behind (the reads in
/// flight are aborted).
pub async fn read_all(redis: &Client) -> Vec<ServerMemory> {
    read_within(redis, None).await
}

/// [`read_all`], each server's reads bounded by `limit`: a server that
/// does not answer within it is [`Read::Unknown`].
pub(crate) async fn read_within(redis: &Client, limit: Option<Duration>) -> Vec<ServerMemory> {
    let mut reads = tokio::task::JoinSet::new();
    for server in redis.active_connections() {
        let redis = redis.clone();
        reads.spawn(async move {
            let name = server.to_string();
            let read = read_one(&redis, server);
            match limit {
                None => read.await,
                Some(limit) => {
                    tokio::time::timeout(limit, read)
                        .await
                        .unwrap_or_else(|_| ServerMemory {
                            server: name,
                            read: Read::Unknown(format!("no answer within {limit:?}")),
                        })
                }
            }
        });
    }
    let mut out = Vec::with_capacity(reads.len());
    while let Some(read) = reads.join_next().await {
        // A read that panicked (it cannot) is left out.
        if let Ok(read) = read {
            out.push(read);
        }
    }
    out.sort_by(|a, b| a.server.cmp(&b.server));
    out
}

/// Read one server's setting (see [`read_all`]).
pub(crate) async fn read_one(redis: &Client, server: Server) -> ServerMemory {
    let name = server.to_string();
    // In a cluster, to that node; elsewhere the one connection is the
    // server's.
    let node = redis.with_options(&Options {
        cluster_node: redis.is_clustered().then_some(server),
        ..Default::default()
    });
    let config: Result<Value, _> = node
        .custom(
            CustomCommand::new_static("CONFIG", None, false),
            vec!["GET", "maxmemory*"],
        )
        .await;
    let config_error = match config.map(|v| from_config(&v)) {
        Ok(Some((maxmemory, policy))) => {
            return ServerMemory {
                server: name,
                read: Read::Read {
                    maxmemory,
                    policy,
                    from_config: true,
                },
            }
        }
        Ok(None) => "CONFIG GET maxmemory*: no maxmemory or maxmemory-policy in the reply".into(),
        Err(e) => format!("CONFIG GET: {}", e.details()),
    };
    let info: Result<String, _> = node
        .custom(
            CustomCommand::new_static("INFO", None, false),
            vec!["memory"],
        )
        .await;
    let read = match info.map(|text| from_info(&text)) {
        Ok(Some((maxmemory, policy))) => Read::Read {
            maxmemory,
            policy,
            from_config: false,
        },
        Ok(None) => Read::Unknown(format!(
            "{config_error}; INFO memory: no maxmemory or maxmemory_policy field"
        )),
        Err(e) => Read::Unknown(format!("{config_error}; INFO memory: {}", e.details())),
    };
    ServerMemory { server: name, read }
}

/// `maxmemory` and `maxmemory-policy` from `CONFIG GET`'s reply: a flat
/// array of name, value pairs (RESP2) or a map (RESP3).
fn from_config(reply: &Value) -> Option<(u64, String)> {
    let pairs: Vec<(String, String)> = match reply {
        Value::Array(items) => items
            .chunks_exact(2)
            .filter_map(|p| Some((p[0].as_string()?, p[1].as_string()?)))
            .collect(),
        Value::Map(map) => map
            .iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_string()?)))
            .collect(),
        _ => return None,
    };
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    Some((
        get("maxmemory")?.trim().parse().ok()?,
        get("maxmemory-policy")?,
    ))
}

/// `maxmemory` and `maxmemory_policy` from `INFO memory`'s text.
fn from_info(text: &str) -> Option<(u64, String)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
            .map(str::to_owned)
    };
    Some((
        field("maxmemory")?.parse().ok()?,
        field("maxmemory_policy")?,
    ))
}

/// Log `memory`'s warning, once per server and policy in this process
/// (a process with many clients of one server, or reconnecting to it, says
/// it once). At `ERROR` level when `refuse` (a server met after `build`,
/// which can no longer be refused).
pub(crate) fn warn_once(memory: &ServerMemory, refuse: bool) {
    static WARNED: Mutex<Option<HashSet<(String, String)>>> = Mutex::new(None);
    let Some(text) = memory.warning() else {
        return;
    };
    let policy = match &memory.read {
        Read::Read { policy, .. } => policy.clone(),
        Read::Unknown(_) => String::new(),
    };
    let first = {
        let mut warned = WARNED.lock().unwrap_or_else(|p| p.into_inner());
        warned
            .get_or_insert_with(HashSet::new)
            .insert((memory.server.clone(), policy.clone()))
    };
    if !first {
        return;
    }
    if refuse {
        tracing::error!(server = %memory.server, policy = %policy, "relaylock: {text}");
    } else {
        tracing::warn!(server = %memory.server, policy = %policy, "relaylock: {text}");
    }
}

/// The error [`OnEvictingServer::Refuse`] gives for `memory`, `None` when
/// it never evicts.
pub(crate) fn refusal(memory: &ServerMemory) -> Option<Error> {
    match &memory.read {
        Read::Read {
            maxmemory, policy, ..
        } if memory.may_evict() == Some(true) => Some(Error::EvictingServer {
            server: memory.server.clone(),
            policy: policy.clone(),
            maxmemory: *maxmemory,
        }),
        Read::Unknown(why) => Some(Error::EvictionUnknown {
            server: memory.server.clone(),
            reason: why.clone(),
        }),
        _ => None,
    }
}

/// Check every server `redis` connects to anew, for as long as the task
/// lives: a Sentinel failover, a cluster node replaced, a server restarted
/// with another configuration. Each new connection's server is read once
/// per connection, within `limit`, and warned about as at `build`.
pub(crate) fn spawn_watch(
    redis: &Client,
    refuse: bool,
    limit: Duration,
) -> tokio::task::JoinHandle<()> {
    let mut reconnects = redis.reconnect_rx();
    let redis = redis.clone();
    tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            let server = match reconnects.recv().await {
                Ok(server) => server,
                Err(RecvError::Lagged(_)) => continue,
                Err(RecvError::Closed) => return,
            };
            if let Ok(memory) = tokio::time::timeout(limit, read_one(&redis, server)).await {
                warn_once(&memory, refuse);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_from_either_reply() {
        let reply = Value::Array(
            [
                "maxmemory",
                "3145728",
                "maxmemory-policy",
                "volatile-lru",
                "maxmemory-samples",
                "5",
            ]
            .into_iter()
            .map(|s| Value::String(s.into()))
            .collect(),
        );
        assert_eq!(
            from_config(&reply),
            Some((3_145_728, "volatile-lru".into()))
        );
        assert_eq!(from_config(&Value::Array(vec![])), None);
        let info = "# Memory\r\nused_memory:1\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\n";
        assert_eq!(from_info(info), Some((0, "noeviction".into())));
        assert_eq!(from_info("# Memory\r\nused_memory:1\r\n"), None);
    }

    #[test]
    fn only_a_limit_with_an_evicting_policy_may_evict() {
        let m = |maxmemory, policy: &str| ServerMemory {
            server: "h:1".into(),
            read: Read::Read {
                maxmemory,
                policy: policy.into(),
                from_config: true,
            },
        };
        assert_eq!(m(0, "allkeys-lru").may_evict(), Some(false));
        assert_eq!(m(1 << 20, "noeviction").may_evict(), Some(false));
        assert_eq!(m(1 << 20, "volatile-ttl").may_evict(), Some(true));
        assert!(m(1 << 20, "volatile-lru")
            .warning()
            .unwrap()
            .contains("h:1"));
        assert!(m(0, "volatile-lru").warning().is_none());
        let unknown = ServerMemory {
            server: "h:1".into(),
            read: Read::Unknown("NOPERM".into()),
        };
        assert_eq!(unknown.may_evict(), None);
        assert!(unknown.warning().unwrap().contains("NOPERM"));
    }
}
