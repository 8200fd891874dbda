//! Test support: a real `redis-server` on a free loopback port, stopped on drop,
//! and helpers to read what the server saw; a real Prometheus scraping a
//! test's metrics ([`prometheus`]).
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use fred::prelude::*;
use fred::types::{CustomCommand, InfoKind};

pub mod cluster;
pub mod counters;
pub mod faults;
pub mod ledger;
pub mod prometheus;
pub mod proxy;
// The one copy lives in the CLI, which ships it (`relaylock bench` starts
// its own server) and cannot depend on this unpublished crate.
#[path = "../../relaylock-cli/src/redis_server.rs"]
mod redis_server;
pub mod sentinel;
pub mod stress;
pub mod tls;
pub mod warnings;
pub use redis_server::{free_port, RedisServer};

/// The client preset of the tests: relaylock's defaults for `url`, with a
/// 50 ms unsubscribe linger, so a test that checks nothing is left behind
/// waits 50 ms for the clean-up instead of half a second. Tests set what
/// they exercise (lease, prefix, timeouts) on top.
pub fn preset(url: &str) -> relaylock::LockClientBuilder {
    relaylock::LockClient::builder()
        .url(url)
        .unsubscribe_linger(Duration::from_millis(50))
}

/// [`preset`] for the fault scenarios (tests/faults.rs, and the
/// semaphore's and read-write lock's): a 1 s lease renewed by the watchdog,
/// bookkeeping kept 1 s, 1 s command timeout, 2 s connect timeout.
pub fn fault_preset(url: &str) -> relaylock::LockClientBuilder {
    preset(url)
        .default_lease(Duration::from_secs(1))
        .side_retention(Duration::from_secs(1))
        .command_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(2))
}

/// A client built from [`fault_preset`], connected.
pub async fn fault_client(url: &str) -> relaylock::LockClient {
    fault_preset(url).build().await.expect("connect")
}

/// Joins load workers that each return (acquisitions, errors), in order,
/// and sums them; panics when one is not done within `bound` of the wait
/// for it ("a worker is stuck").
pub async fn join_workers(
    workers: Vec<tokio::task::JoinHandle<(u64, u64)>>,
    bound: Duration,
) -> (u64, u64) {
    let (mut n, mut errors) = (0, 0);
    for w in workers {
        let (a, e) = tokio::time::timeout(bound, w)
            .await
            .expect("a worker is stuck")
            .unwrap();
        n += a;
        errors += e;
    }
    (n, errors)
}

/// A tiny deterministic generator for the tests' random points (no
/// dependency for it): `Lcg(seed).below(n)` is uniform enough in `0..n`.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// [`preset`], connected.
pub async fn client(url: &str) -> relaylock::LockClient {
    preset(url).build().await.expect("connect")
}

/// How long until `other` can take `key`, polled every 10 ms, at most
/// `limit`; `None` if it never could.
pub async fn until_free(
    other: &relaylock::LockClient,
    key: &str,
    limit: Duration,
) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(g) = other.try_lock(key).await.unwrap() {
            let at = start.elapsed();
            g.release().await.unwrap();
            return Some(at);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

/// Polls `fut` exactly once, then drops it: its command is queued on the
/// connection (and runs in Redis), its outcome never reaches the caller.
pub async fn poll_once_and_drop<F: Future>(fut: F) {
    let fut = std::pin::pin!(fut);
    let _ = futures::poll!(fut);
}

/// A client on a fred client that has no command timeout of its own
/// (connected here), with relaylock's `command_timeout` set to `limit`: so
/// relaylock itself must bound every command.
pub async fn client_on_untimed_fred(url: &str, limit: Duration) -> relaylock::LockClient {
    let fred = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    fred.init().await.unwrap();
    relaylock::LockClient::builder()
        .fred_client(fred)
        .command_timeout(limit)
        .build()
        .await
        .unwrap()
}

/// `SCRIPT FLUSH`: the next script call meets NOSCRIPT and reloads (as after
/// a restart, or a failover to a server without the scripts).
pub async fn script_flush(admin: &Client) {
    let _: () = admin
        .custom(
            CustomCommand::new_static("SCRIPT", None, false),
            vec!["FLUSH"],
        )
        .await
        .unwrap();
}

/// The inspection helpers of the tests.
pub trait Admin {
    /// A plain fred client for inspecting the server.
    fn admin(&self) -> impl Future<Output = Client>;
}

impl Admin for RedisServer {
    async fn admin(&self) -> Client {
        let client = Builder::from_config(Config::from_url(&self.url()).unwrap())
            .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
            .build()
            .unwrap();
        client.init().await.expect("admin connection");
        client
    }
}

/// Create (or reset) the ACL user `name` with password `pw` and `rules`
/// (for example `["~*", "resetchannels", "+@all"]`: everything but pub/sub
/// channels).
pub async fn acl_user(admin: &Client, name: &str, rules: &[&str]) {
    let password = format!(">{PASSWORD}");
    let mut args = vec!["SETUSER", name, "on", password.as_str()];
    args.extend_from_slice(rules);
    let _: () = admin
        .custom(CustomCommand::new_static("ACL", None, false), args)
        .await
        .unwrap();
}

/// The password [`acl_user`] sets.
pub const PASSWORD: &str = "pw";

/// A relaylock client (relaylock's defaults) of the ACL user `nosub`,
/// created here on `server`: every command and key, but no channel, so its
/// SUBSCRIBEs are refused and its waiters poll.
pub async fn channel_denied_client(admin: &Client, server: &RedisServer) -> relaylock::LockClient {
    acl_user(admin, "nosub", &["~*", "resetchannels", "+@all"]).await;
    relaylock::LockClient::builder()
        .url(format!(
            "redis://nosub:{PASSWORD}@127.0.0.1:{}",
            server.port
        ))
        .build()
        .await
        .unwrap()
}

/// `CLIENT KILL` with `filter` (for example `["TYPE", "pubsub"]` or
/// `["USER", "nosub"]`): the number of connections closed.
pub async fn client_kill(admin: &Client, filter: &[&str]) -> i64 {
    let mut args = vec!["KILL"];
    args.extend_from_slice(filter);
    admin
        .custom(CustomCommand::new_static("CLIENT", None, false), args)
        .await
        .unwrap()
}

/// Write through `admin` and `WAIT` (5 s at most) until one replica
/// acknowledged it: the primary's replica is online and acknowledging.
/// Panics if none does.
pub async fn until_a_replica_acknowledges(admin: &Client) {
    let _: () = admin.set("warm", "1", None, None, false).await.unwrap();
    let acked: i64 = admin
        .custom(CustomCommand::new_static("WAIT", None, true), vec![1, 5000])
        .await
        .unwrap();
    assert_eq!(acked, 1, "no replica acknowledged within 5 s");
}

/// `INFO commandstats` as command name -> calls.
pub async fn command_calls(admin: &Client) -> HashMap<String, u64> {
    command_stats(admin, |field| field("calls=")).await
}

/// `INFO commandstats` as command name -> calls that did not fail: a
/// script's first `EVALSHA` on a fresh server answers NOSCRIPT (a failed
/// call) before fred loads it and sends it again, which a count of the
/// script's runs leaves out.
pub async fn command_runs(admin: &Client) -> HashMap<String, u64> {
    command_stats(admin, |field| {
        let total = field("calls=");
        total - field("failed_calls=").min(total)
    })
    .await
}

/// `INFO commandstats` as command name -> `count(field)`, where `field`
/// reads one of the command's numeric fields (`calls=`, `failed_calls=`,
/// ...; 0 when absent).
async fn command_stats(
    admin: &Client,
    count: impl Fn(&dyn Fn(&str) -> u64) -> u64,
) -> HashMap<String, u64> {
    let info: String = admin.info(Some(InfoKind::CommandStats)).await.unwrap();
    let mut stats = HashMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, fields)) = rest.split_once(':') else {
            continue;
        };
        let field = |key: &str| -> u64 {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key))
                .map_or(0, |n| n.parse().unwrap())
        };
        stats.insert(name.to_owned(), count(&field));
    }
    stats
}

/// Calls of `cmd` between two snapshots of [`command_calls`].
pub fn delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>, cmd: &str) -> u64 {
    after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0)
}

/// Subscribers of one channel, from `PUBSUB NUMSUB`; for a lock's channel,
/// summed over the clients' own channels (`<channel>:<client>`).
pub async fn numsub(admin: &Client, channel: &str) -> i64 {
    let mut names = vec![channel.to_owned()];
    // A lock's channel `<value>:ch` (protocol 4) is subscribed per client,
    // as `<value>:ch:<client>`: count those too.
    if channel.ends_with("}:ch") {
        names.extend(channels(admin, &format!("{}:*", glob_escape(channel))).await);
    }
    let mut n = 0;
    for name in names {
        let v: Vec<Value> = admin
            .custom(
                CustomCommand::new_static("PUBSUB", None, false),
                vec!["NUMSUB".to_owned(), name],
            )
            .await
            .unwrap();
        n += v[1].as_i64().unwrap();
    }
    n
}

/// `s` as a glob pattern that matches only itself (`PUBSUB CHANNELS`, `KEYS`).
pub fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Channels with at least one subscriber whose name matches `pattern`.
pub async fn channels(admin: &Client, pattern: &str) -> Vec<String> {
    admin
        .custom(
            CustomCommand::new_static("PUBSUB", None, false),
            vec!["CHANNELS", pattern],
        )
        .await
        .unwrap()
}

/// Keys matching `pattern` (tests only: KEYS is O(n)).
pub async fn keys(admin: &Client, pattern: &str) -> Vec<String> {
    admin
        .custom(
            CustomCommand::new_static("KEYS", None, false),
            vec![pattern],
        )
        .await
        .unwrap()
}

/// Poll `check` until it returns true or `limit` passes; returns whether it did.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The fields of a lock's value (protocol 4, see src/scripts/):
/// `head|queue|void`, or a fast-path hold's token alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockValue {
    /// `<token>:<fence>` (held), `<token>` (held, taken on the fast path:
    /// its fence is only in its holder), `~<client>:<fence>:<until>`
    /// (reserved) or `-<fence>` (free).
    pub head: String,
    /// Client ids waiting, oldest first.
    pub queue: Vec<String>,
    /// Until when void markers may exist (server ms), or empty.
    pub void: String,
}

impl LockValue {
    /// Parse a value; `None` if it is not a protocol 4 value.
    pub fn parse(value: &str) -> Option<LockValue> {
        let fields: Vec<&str> = value.split('|').collect();
        let (head, queue, void) = match fields[..] {
            [head] => (head, "", ""),
            [head, queue, void] => (head, queue, void),
            _ => return None,
        };
        Some(LockValue {
            head: head.to_owned(),
            queue: queue
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_owned)
                .collect(),
            void: void.to_owned(),
        })
    }

    /// A tombstone: nobody holds the lock.
    pub fn is_free(&self) -> bool {
        self.head.starts_with('-')
    }

    /// Whether the head is the hold `token` with `fence`: `<token>:<fence>`,
    /// or a fast-path hold's `<token>` alone (its fence is not in Redis).
    pub fn held_by(&self, token: &str, fence: u64) -> bool {
        self.head == token || self.head == format!("{token}:{fence}")
    }

    /// The client a hand-over reserved the lock for.
    pub fn reserved_for(&self) -> Option<&str> {
        self.head.strip_prefix('~')?.split(':').next()
    }

    /// The token of the holder.
    pub fn token(&self) -> Option<&str> {
        if self.is_free() || self.head.starts_with('~') {
            return None;
        }
        self.head.split(':').next()
    }

    /// The fence in the head (the holder's, or the last one issued).
    pub fn fence(&self) -> Option<u64> {
        let head = self.head.trim_start_matches(['-', '~']);
        let mut parts = head.split(':');
        if self.head.starts_with('-') {
            return parts.next()?.parse().ok();
        }
        parts.nth(1)?.parse().ok()
    }
}

/// The record of the lock named `name` (protocol 4's `<name>:f`): its fence
/// counter `f`, its ring of released fences, and `u`, the token an
/// operator's unlock released last.
pub async fn lock_record(admin: &Client, name: &str) -> HashMap<String, String> {
    admin.hgetall(format!("{name}:f")).await.unwrap()
}

/// Whether a lock's raw value holds `token`: the token alone (a fast-path
/// hold) or a head of the token with or without its fence.
pub fn holds_token(value: &str, token: &str) -> bool {
    value
        .strip_prefix(token)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([':', '|']))
}

/// The value of the lock named `name` (a `LockClient::redis_key`), parsed;
/// `None` when the key is absent (or not a protocol 4 value).
pub async fn lock_value(admin: &Client, name: &str) -> Option<LockValue> {
    // A name that holds no string (a lock's record, a hash) is no lock.
    let raw: Option<String> = admin.get(name).await.ok().flatten();
    raw.as_deref().and_then(LockValue::parse)
}

/// Whether the lock named `name` is taken: held, or reserved for a client
/// (a tombstone or an absent key is free). Reads the value directly, unlike
/// `LockClient::is_locked`, so a test can check one client's lock from
/// outside.
pub async fn taken(admin: &Client, name: &str) -> bool {
    let raw: Option<String> = admin.get(name).await.unwrap();
    match raw {
        None => false,
        Some(v) => LockValue::parse(&v).is_none_or(|v| !v.is_free()),
    }
}

/// Whether `client` is in the queue of the lock named `name`.
pub async fn is_queued(admin: &Client, name: &str, client: &str) -> bool {
    lock_value(admin, name)
        .await
        .is_some_and(|v| v.queue.iter().any(|c| c == client))
}

/// Rewrite the queue field of the lock named `name` atomically (keeping the
/// key's TTL): `front` puts `client` first, otherwise it is removed. For
/// tests that stage a ghost ahead of everyone, or a client falling out of
/// the queue. Returns false when the key holds no protocol 4 value.
pub async fn edit_queue(admin: &Client, name: &str, client: &str, front: bool) -> bool {
    const EDIT: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
-- A fast-path hold (its token alone) gets its queue field, as the acquire
-- script gives it when a client queues.
if not string.find(v, '|', 1, true) then v = v .. '||' end
local head, queue, rest = string.match(v, '^([^|]*)|([^|]*)(|.*)$')
if not head then return 0 end
local q = {}
if ARGV[2] == '1' then q[1] = ARGV[1] end
for c in string.gmatch(queue, '[^,]+') do
  if c ~= ARGV[1] then q[#q + 1] = c end
end
redis.call('SET', KEYS[1], head .. '|' .. table.concat(q, ',') .. rest, 'KEEPTTL')
return 1
"#;
    let done: i64 = admin
        .eval(
            EDIT,
            vec![name],
            vec![client, if front { "1" } else { "0" }],
        )
        .await
        .unwrap();
    done == 1
}

/// Wait (at most 10 s) until `client` is in the queue of `key`: one of its
/// tasks tried, found the lock held and waits. Panics otherwise.
pub async fn until_queued(admin: &Client, client: &relaylock::LockClient, key: &str) {
    let name = client.redis_key(key);
    let id = client.client_id().to_owned();
    let queued = eventually(Duration::from_secs(10), || async {
        is_queued(admin, &name, &id).await
    })
    .await;
    assert!(queued, "client {id} never queued for {key}");
}

/// Wait (at most 10 s) until `channel` has `n` subscribers. Panics
/// otherwise.
pub async fn until_subscribers(admin: &Client, channel: &str, n: i64) {
    let reached = eventually(Duration::from_secs(10), || async {
        numsub(admin, channel).await == n
    })
    .await;
    assert!(reached, "{channel} never had {n} subscribers");
}

/// A task that waits for the lock on `key` with `client`, releases it at
/// once, and returns the instant it had it.
pub fn spawn_waiter(client: &relaylock::LockClient, key: &str) -> tokio::task::JoinHandle<Instant> {
    let (client, key) = (client.clone(), key.to_owned());
    tokio::spawn(async move {
        let g = client.lock(&key).await.unwrap();
        let at = Instant::now();
        g.release().await.unwrap();
        at
    })
}

/// Start this test binary again as a child process running only `test`
/// (`--exact --nocapture`), with `env` set to `value` (the test's child
/// role reads it), and wait until its standard output has a line starting
/// with `prefix`: the child holds what it was started to hold. Returns the
/// child (kill it to kill the holder) and the rest of that line. Panics if
/// the child ends without such a line.
pub async fn child_holding(
    test: &str,
    env: &str,
    value: &str,
    prefix: &'static str,
) -> (std::process::Child, String) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture"])
        .env(env, value)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the child process");
    let stdout = child.stdout.take().unwrap();
    let rest = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix(prefix).map(str::to_owned))
    })
    .await
    .unwrap();
    let rest = rest.unwrap_or_else(|| panic!("the child {test} never printed {prefix:?}"));
    (child, rest)
}
