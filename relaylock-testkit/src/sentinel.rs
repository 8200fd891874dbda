//! A throwaway Redis Sentinel deployment on free loopback ports: a primary,
//! one replica and three `redis-sentinel` processes monitoring them (quorum
//! 2), each sentinel with its own config file in a temp dir. Everything is
//! stopped on drop.
//!
//! Starting it is blocking (call it before the workload starts); the helpers
//! used while a workload runs ([`Sentinels::failover`],
//! [`Sentinels::wait_promoted`], [`Sentinels::wait_demoted`]) are async and
//! sleep with tokio between short loopback queries.
//!
//! Both servers run with `repl-diskless-sync-delay 0`: Redis 7 otherwise waits
//! 5 s before a full sync, to batch replicas, and after a failover the
//! demoted primary needs one before it acknowledges `WAIT` again.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, RedisServer};

/// The error when the binary is missing: names the install command.
pub const SENTINEL_INSTALL_HINT: &str = "redis-sentinel is not on PATH. Install it with \
`apt-get install -y redis-sentinel` (Debian/Ubuntu) or your system's package manager.";

/// The name the sentinels monitor the primary under.
pub const SERVICE: &str = "relaylock";

/// `down-after-milliseconds`: how long a server may not answer before a
/// sentinel considers it down.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// `failover-timeout`.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_millis(5000);

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// A status or bulk string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// The elements of an array (empty for anything else).
    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(v)) => v,
            _ => &[],
        }
    }

    /// A flat `[field, value, field, value, ...]` array as a map, as
    /// `SENTINEL REPLICAS` and `SENTINEL SENTINELS` return each instance.
    pub fn fields(&self) -> HashMap<String, String> {
        self.items()
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())),
                _ => None,
            })
            .collect()
    }
}

fn read_reply(r: &mut impl BufRead) -> Result<Reply, String> {
    let mut line = String::new();
    r.read_line(&mut line).map_err(|e| format!("read: {e}"))?;
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at_checked(1).ok_or("empty reply")?;
    let num = || {
        rest.parse::<i64>()
            .map_err(|e| format!("bad length {rest:?}: {e}"))
    };
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(num()?),
        "$" => {
            let n = num()?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let mut body = vec![0u8; n as usize + 2];
                r.read_exact(&mut body).map_err(|e| format!("read: {e}"))?;
                body.truncate(n as usize);
                Reply::Bulk(Some(String::from_utf8_lossy(&body).into_owned()))
            }
        }
        "*" => {
            let n = num()?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(read_reply(r)?);
                }
                Reply::Array(Some(v))
            }
        }
        _ => return Err(format!("unexpected reply line {line:?}")),
    })
}

/// Send one command to `127.0.0.1:port` on a fresh connection and read the
/// reply (500 ms to connect, 2 s to answer).
pub fn call(port: u16, args: &[&str]) -> Result<Reply, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))
        .map_err(|e| format!("connect {port}: {e}"))?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let _ = s.set_nodelay(true);
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        let _ = write!(req, "${}\r\n{a}\r\n", a.len());
    }
    s.write_all(req.as_bytes())
        .map_err(|e| format!("write {port}: {e}"))?;
    read_reply(&mut BufReader::new(s))
}

/// `ROLE` of the server on `port`: `["master", ..]` or
/// `["slave", host, port, state, offset]`, as strings (empty on error).
pub fn role(port: u16) -> Vec<String> {
    match call(port, &["ROLE"]) {
        Ok(r) => r
            .items()
            .iter()
            .map(|i| match i {
                Reply::Int(n) => n.to_string(),
                other => other.as_str().unwrap_or_default().to_owned(),
            })
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// A `redis-sentinel` process, killed on drop.
struct Sentinel {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sentinel {
    /// Start a sentinel monitoring `primary` on a free port, its config file
    /// (which it rewrites as it learns) and log in `dir`.
    fn start(dir: &Path, primary: u16) -> Sentinel {
        for _ in 0..10 {
            let port = free_port();
            let conf = dir.join(format!("sentinel-{port}.conf"));
            let log = dir.join(format!("sentinel-{port}.log"));
            let text = format!(
                "port {port}\n\
                 bind 127.0.0.1\n\
                 daemonize no\n\
                 dir {dir}\n\
                 logfile {log}\n\
                 sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {SERVICE} {down}\n\
                 sentinel failover-timeout {SERVICE} {failover}\n\
                 sentinel parallel-syncs {SERVICE} 1\n",
                dir = dir.display(),
                log = log.display(),
                down = DOWN_AFTER.as_millis(),
                failover = FAILOVER_TIMEOUT.as_millis(),
            );
            std::fs::write(&conf, text).unwrap_or_else(|e| panic!("write {}: {e}", conf.display()));
            let mut child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => panic!("{SENTINEL_INSTALL_HINT}"),
                    _ => panic!("could not run redis-sentinel: {e}"),
                });
            let started = Instant::now();
            loop {
                if matches!(call(port, &["PING"]), Ok(Reply::Status(s)) if s == "PONG") {
                    return Sentinel { child, port, log };
                }
                if let Ok(Some(_)) = child.try_wait() {
                    // Most likely the port was taken meanwhile: next one.
                    break;
                }
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "redis-sentinel did not answer PING within 10 s on port {port}; log:\n{}",
                        tail(&log)
                    );
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        panic!("could not start redis-sentinel on a free port after 10 tries");
    }
}

/// The last lines of a log file, for panic messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A primary, one replica and three sentinels (quorum 2).
pub struct Sentinels {
    // Dropped in this order: the sentinels first, so none of them reacts to
    // the servers going away.
    sentinels: Vec<Sentinel>,
    /// The primary as started (a replica after a failover).
    pub initial_primary: RedisServer,
    /// The replica as started (the primary after a failover).
    pub initial_replica: RedisServer,
    dir: TempDir,
}

impl Sentinels {
    /// Start everything and wait (at most 30 s) until every sentinel knows
    /// the replica, sees it in sync, and knows the two other sentinels.
    /// Panics with the install hint when redis-sentinel is missing.
    pub fn start() -> Sentinels {
        let extra = ["--repl-diskless-sync-delay", "0"];
        let primary = RedisServer::try_start(&extra).unwrap_or_else(|e| panic!("{e}"));
        let replica = RedisServer::start_replica_of_with(&primary, &extra);
        let dir = std::env::temp_dir().join(format!(
            "relaylock-sentinel-{}-{}",
            primary.port,
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let dir = TempDir(dir);
        let sentinels = (0..3)
            .map(|_| Sentinel::start(&dir.0, primary.port))
            .collect();
        let setup = Sentinels {
            sentinels,
            initial_primary: primary,
            initial_replica: replica,
            dir,
        };
        let started = Instant::now();
        loop {
            let problems = setup.not_ready();
            if problems.is_empty() {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                let logs: Vec<String> = setup
                    .sentinels
                    .iter()
                    .map(|s| format!("--- sentinel {} ---\n{}", s.port, tail(&s.log)))
                    .collect();
                panic!(
                    "the sentinels were not ready within 30 s: {}\n{}",
                    problems.join("; "),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        setup
    }

    /// What keeps the deployment from being ready (empty when it is).
    fn not_ready(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let replica = self.initial_replica.port.to_string();
        for s in &self.sentinels {
            match call(s.port, &["SENTINEL", "REPLICAS", SERVICE]) {
                Ok(r) => {
                    let seen = r.items().iter().map(Reply::fields).any(|f| {
                        f.get("port") == Some(&replica)
                            && f.get("flags").map(String::as_str) == Some("slave")
                            && f.get("master-link-status").map(String::as_str) == Some("ok")
                    });
                    if !seen {
                        problems.push(format!(
                            "sentinel {} does not see the replica in sync",
                            s.port
                        ));
                    }
                }
                Err(e) => problems.push(format!("sentinel {}: {e}", s.port)),
            }
            match call(s.port, &["SENTINEL", "SENTINELS", SERVICE]) {
                Ok(r) => {
                    let healthy = r
                        .items()
                        .iter()
                        .map(Reply::fields)
                        .filter(|f| f.get("flags").map(String::as_str) == Some("sentinel"))
                        .count();
                    if healthy != self.sentinels.len() - 1 {
                        problems.push(format!(
                            "sentinel {} knows {healthy} other sentinels",
                            s.port
                        ));
                    }
                }
                Err(e) => problems.push(format!("sentinel {}: {e}", s.port)),
            }
        }
        problems
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The URL for relaylock (fred's syntax): the first sentinel as host,
    /// the others as `node=`, and the service name.
    pub fn url(&self) -> String {
        let mut url = format!(
            "redis-sentinel://127.0.0.1:{}?sentinelServiceName={SERVICE}",
            self.sentinels[0].port
        );
        for s in &self.sentinels[1..] {
            let _ = write!(url, "&node=127.0.0.1:{}", s.port);
        }
        url
    }

    /// The primary's port as the sentinel on `port` reports it
    /// (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    pub fn reported_primary(port: u16) -> Option<u16> {
        let r = call(port, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE]).ok()?;
        r.items().get(1)?.as_str()?.parse().ok()
    }

    /// `SENTINEL FAILOVER` to the first sentinel: a failover without
    /// agreement, as if the primary were down. Retried for at most 10 s while
    /// the sentinel refuses (`-NOGOODSLAVE` until it has fresh information
    /// about the replica, `-INPROG`). Returns when it was accepted.
    pub async fn failover(&self) -> Instant {
        let port = self.sentinels[0].port;
        let started = Instant::now();
        loop {
            match call(port, &["SENTINEL", "FAILOVER", SERVICE]) {
                Ok(Reply::Status(s)) if s == "OK" => return Instant::now(),
                other => assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "SENTINEL FAILOVER was refused for 10 s: {other:?}; log:\n{}",
                    tail(&self.sentinels[0].log)
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait until every sentinel reports the initial replica as the primary
    /// and its `ROLE` says master; returns when that was first seen. Panics
    /// after `limit`.
    pub async fn wait_promoted(&self, limit: Duration) -> Instant {
        let new = self.initial_replica.port;
        self.poll(limit, "the replica was not promoted", || {
            self.sentinels
                .iter()
                .all(|s| Self::reported_primary(s.port) == Some(new))
                && role(new).first().map(String::as_str) == Some("master")
        })
        .await
    }

    /// Wait until the initial primary's `ROLE` says it replicates the
    /// initial replica: the sentinels reconfigured it (and with that closed
    /// its client connections). Panics after `limit`.
    pub async fn wait_demoted(&self, limit: Duration) -> Instant {
        self.wait_demoted_between(limit).await.1
    }

    /// As [`wait_demoted`](Self::wait_demoted), with when the demotion
    /// happened at the earliest: the start of the last check that still saw
    /// the old primary undemoted. The demotion happened between the two
    /// instants returned.
    pub async fn wait_demoted_between(&self, limit: Duration) -> (Instant, Instant) {
        let (old, new) = (
            self.initial_primary.port,
            self.initial_replica.port.to_string(),
        );
        let mut not_before = Instant::now();
        let seen = self
            .poll(limit, "the old primary was not demoted", || {
                let checked = Instant::now();
                let r = role(old);
                let demoted =
                    r.first().map(String::as_str) == Some("slave") && r.get(2) == Some(&new);
                if !demoted {
                    not_before = checked;
                }
                demoted
            })
            .await;
        (not_before, seen)
    }

    /// Wait until the server on `port` is a replica whose link is up
    /// (`ROLE` state `connected`). Panics after `limit`.
    pub async fn wait_synced(&self, port: u16, limit: Duration) -> Instant {
        self.poll(limit, "the replica did not sync", || {
            let r = role(port);
            r.first().map(String::as_str) == Some("slave")
                && r.get(3).map(String::as_str) == Some("connected")
        })
        .await
    }

    async fn poll(&self, limit: Duration, what: &str, mut check: impl FnMut() -> bool) -> Instant {
        let started = Instant::now();
        loop {
            if check() {
                return Instant::now();
            }
            if started.elapsed() > limit {
                let logs: Vec<String> = self
                    .sentinels
                    .iter()
                    .map(|s| format!("--- sentinel {} ---\n{}", s.port, tail(&s.log)))
                    .collect();
                panic!(
                    "{what} within {limit:?}: roles {:?} / {:?}\n{}",
                    role(self.initial_primary.port),
                    role(self.initial_replica.port),
                    logs.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
