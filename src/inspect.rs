//! Read-only inspection of what relaylock keeps in Redis for one name: who
//! holds it, for how long, who is queued and since when, who listens
//! ([`LockClient::inspect`](crate::LockClient::inspect); the CLI's
//! `relaylock status`).
//!
//! It runs plain read commands only (`GET`, `PTTL`, `ZRANGE`, `HGETALL`,
//! `TIME`, `PUBSUB NUMSUB` or, in Redis Cluster, `PUBSUB SHARDNUMSUB`), never
//! a script, so an operator's ACL user can be read-only (docs/security.md).
//! The reads are not one atomic snapshot: a state that changes while they
//! run may show half old, half new. Nothing here is used by the lock paths.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::interfaces::SortedSetsInterface;
use fred::interfaces::{ClientLike, HashesInterface, KeysInterface, PubsubInterface};
use fred::types::{ClusterHash, CustomCommand, Value};
use fred::util::redis_keyslot;

use crate::error::{Error, Result};
use crate::inner::ClientInner;
use crate::scripts::{Kind, Names, RW_WRITE};

/// Which primitive a [`State`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Primitive {
    /// A lock ([`LockClient::lock`](crate::LockClient::lock)).
    Mutex,
    /// A semaphore ([`LockClient::semaphore`](crate::LockClient::semaphore)).
    Semaphore,
    /// A read-write lock ([`LockClient::rw_lock`](crate::LockClient::rw_lock)).
    RwLock,
}

impl std::fmt::Display for Primitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Primitive::Mutex => "mutex",
            Primitive::Semaphore => "semaphore",
            Primitive::RwLock => "rwlock",
        })
    }
}

/// Who a client is: its id, and the name and start it recorded
/// ([`LockClientBuilder::name`](crate::LockClientBuilder::name)), which
/// outlive its process by a day (so a holder killed with `kill -9` is still
/// named). `name` and `started` are `None` when nothing is recorded (a
/// client of an older relaylock, an ACL that refused the write, a record
/// that expired).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Who {
    /// The client's id ([`LockClient::client_id`](crate::LockClient::client_id)).
    pub id: String,
    /// Its name: by default `<host>:<pid>`.
    pub name: Option<String>,
    /// When it was built, by its own clock.
    pub started: Option<SystemTime>,
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.name {
            Some(name) => write!(f, "{name} ({})", self.id),
            None => f.write_str(&self.id),
        }
    }
}

/// The id of the client that made lock token `token` (a token starts with
/// its client's id); `None` for a token of another form (a UUID, from a
/// relaylock before client ids in tokens).
pub fn client_of_token(token: &str) -> Option<&str> {
    crate::token::client_of(token)
}

/// One hold: a lock's holder, a semaphore permit hold, a read or a write.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The acquisition's token ([`LockGuard::token`](crate::LockGuard::token)).
    pub token: String,
    /// Its fencing token. For a lock taken on the fast path (its value the
    /// token alone), the lock's record's counter, which no other fence
    /// moves while the lock is held; 0 if the record is gone.
    pub fencing_token: u64,
    /// What is left of its lease, by the server's clock.
    pub remaining: Duration,
    /// Permits it holds: 1 for a lock or a read, `n` for a semaphore's
    /// `permits(n)`, every permit for a write (see [`writer`](Self::writer)).
    pub permits: u32,
    /// A read-write lock's write.
    pub writer: bool,
    /// The client that holds it (from its token), when the token names one.
    pub who: Option<Who>,
    /// Since when it is held. A lock's: when the call that took it began,
    /// by its client's clock (relaylock's tokens carry it; for a lock taken
    /// after a wait, the wait is included); `None` for a token of another
    /// form. A semaphore's or read-write lock's: when its fencing token was
    /// issued (those fences are the server's clock in microseconds, raised
    /// by at most a few µs to stay increasing); `None` for a fence that is
    /// not a plausible time.
    pub since: Option<SystemTime>,
}

/// A client's reservation: a release handed the lock (or permits) to it,
/// and one of its waiters is about to take it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reservation {
    /// The client's id ([`LockClient::client_id`](crate::LockClient::client_id)).
    pub client: String,
    /// Permits reserved (1 for a lock).
    pub permits: u32,
    /// Until the reservation lapses unused.
    pub remaining: Duration,
    /// Reserved for the client's writers (a read-write lock).
    pub writer: bool,
    /// Who the client is.
    pub who: Option<Who>,
}

/// A client in the queue of waiting clients.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Queued {
    /// The client's id.
    pub client: String,
    /// Permits its queue entry asks for (1 for a lock; a read-write lock's
    /// readers ask for as many as are waiting).
    pub permits: u32,
    /// The limit its callers gave (semaphores), `None` for a lock.
    pub limit: Option<u32>,
    /// The client's writers (a read-write lock), not its readers.
    pub writer: bool,
    /// How long since the client joined the queue by a refused try, by the
    /// server's clock: it has had waiters ever since. `None` when not
    /// recorded (a client of an older relaylock, an ACL without the hash
    /// commands, or a wait that outlived the record: the record lives the
    /// side retention after the client's last try).
    pub waiting: Option<Duration>,
    /// Who the client is.
    pub who: Option<Who>,
}

/// What relaylock keeps for one primitive under one name.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct State {
    /// Which primitive.
    pub primitive: Primitive,
    /// Its value's Redis name.
    pub redis_key: String,
    /// The value exists but was not written by relaylock (protocol 3):
    /// relaylock treats the name as held by another owner.
    pub foreign: bool,
    /// The holds, in no particular order.
    pub holders: Vec<Holder>,
    /// Reservations for clients about to take over.
    pub reservations: Vec<Reservation>,
    /// The waiting clients, first to be served first.
    pub queue: Vec<Queued>,
    /// The last fencing token issued (0 when unknown). For a lock, its
    /// record's counter, which also counts tries that were refused.
    pub last_fence: u64,
    /// Permits held or reserved, by the semaphore's own count (`None` for a
    /// lock).
    pub used: Option<u64>,
    /// Subscribers of each of its release channels (`PUBSUB NUMSUB`, or
    /// `SHARDNUMSUB` in a cluster): one per client with waiters, usually. A
    /// lock's channels are per client (`<value>:ch:<client>`), listed for
    /// the clients it names: reserved for, then queued.
    pub subscribers: Vec<(String, u64)>,
}

/// What [`LockClient::inspect`](crate::LockClient::inspect) found for a name:
/// each primitive that has a value in Redis.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The name, as given.
    pub key: String,
    /// The lock, semaphore and read-write lock of that name that exist.
    pub states: Vec<State>,
}

/// [`LockClient::inspect`](crate::LockClient::inspect) without a
/// `LockClient`: on any connected fred client, for the names under
/// `prefix`. A `LockClient` loads its scripts and subscribes; this needs
/// nothing but the read commands above, so an operator's read-only ACL user
/// is enough (`relaylock status` uses it). Each command is bounded by the
/// fred client's own command timeout.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use fred::prelude::*;
/// let redis = Builder::from_config(Config::from_url("redis://127.0.0.1:6379")?).build()?;
/// redis.init().await?;
/// let found = relaylock::inspect::inspect(&redis, "relaylock", "orders:42").await?;
/// println!("{} primitives under that name", found.states.len());
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// As for [`LockClient::inspect`](crate::LockClient::inspect).
///
/// # Cancel safety
///
/// Cancel-safe: it only reads.
pub async fn inspect(redis: &fred::clients::Client, prefix: &str, key: &str) -> Result<Inspection> {
    crate::options::validate_key(key)?;
    read(redis, prefix, key, None).await
}

/// For a `LockClient`: each command bounded by its command timeout.
pub(crate) async fn with_client(inner: &ClientInner, key: &str) -> Result<Inspection> {
    inner.check_key(key)?;
    read(
        inner.calls.redis(),
        &inner.prefix,
        key,
        Some(inner.command_timeout),
    )
    .await
}

/// The state of one primitive's value (`names`), `None` when it has none:
/// its holders, its queue with how long each client waited by the server's
/// clock `now_ms`, and who listens on its channels.
async fn read_one(
    redis: &fred::clients::Client,
    names: &Names,
    now_ms: i64,
    limit: Option<Duration>,
) -> Result<Option<State>> {
    let value: Option<String> = run(limit, redis.get(&names.lock)).await?;
    let Some(value) = value else {
        return free_lock(redis, names, limit).await;
    };
    let times: HashMap<String, i64> = run(limit, redis.hgetall(names.queue_times())).await?;
    let mut state = if names.kind == Kind::Mutex {
        let pttl: i64 = run(limit, redis.pttl(&names.lock)).await?;
        // The record's counter: the last fence issued (a fast-path hold
        // keeps its own only in its holder).
        let counter: Option<u64> = run(limit, redis.hget(names.record(), "f")).await?;
        parse_lock(&value, pttl, counter.unwrap_or(0))
    } else {
        let (h, t) = names.side();
        let holds: Vec<(String, f64)> =
            run(limit, redis.zrange(&h, 0, -1, None, false, None, true)).await?;
        let facts: HashMap<String, String> = run(limit, redis.hgetall(&t)).await?;
        let primitive = if names.kind == Kind::Semaphore {
            Primitive::Semaphore
        } else {
            Primitive::RwLock
        };
        parse_counted(primitive, &value, &holds, &facts, now_ms)
    };
    state.redis_key = names.lock.to_string();
    for q in &mut state.queue {
        let id = if q.writer {
            format!("{}.w", q.client)
        } else {
            q.client.clone()
        };
        q.waiting = times
            .get(&id)
            .map(|since| Duration::from_millis(now_ms.saturating_sub(*since).max(0) as u64));
    }
    state.subscribers = listeners(redis, names, &state, limit).await?;
    Ok(Some(state))
}

/// Who listens on the channels of `names`, one count per channel: a
/// lock's messages go to each client's own channel, so for a lock the
/// channels of the clients its `state` names (queued or reserved for).
async fn listeners(
    redis: &fred::clients::Client,
    names: &Names,
    state: &State,
    limit: Option<Duration>,
) -> Result<Vec<(String, u64)>> {
    let channels = match names.kind {
        Kind::Read | Kind::Write => {
            let (r, w) = names.script_channels();
            vec![r, w]
        }
        Kind::Semaphore => vec![names.channel.to_string()],
        Kind::Mutex | Kind::Multi => state
            .reservations
            .iter()
            .map(|r| &r.client)
            .chain(state.queue.iter().map(|q| &q.client))
            .map(|client| format!("{}:{client}", names.channel))
            .collect(),
    };
    let cluster = redis.is_clustered();
    let mut counts = Vec::with_capacity(channels.len());
    for channel in channels {
        let reply: Vec<Value> = if cluster {
            run(limit, redis.pubsub_shardnumsub(channel.clone())).await?
        } else {
            run(limit, redis.pubsub_numsub(channel.clone())).await?
        };
        let n = reply.get(1).and_then(Value::as_i64).unwrap_or(0).max(0) as u64;
        counts.push((channel, n));
    }
    Ok(counts)
}

/// One read, bounded by `limit` when given.
async fn run<T>(
    limit: Option<Duration>,
    command: impl std::future::Future<Output = std::result::Result<T, fred::error::Error>>,
) -> Result<T> {
    Ok(match limit {
        None => command.await?,
        Some(limit) => crate::error::with_timeout(limit, command).await?,
    })
}

async fn read(
    redis: &fred::clients::Client,
    prefix: &str,
    key: &str,
    limit: Option<Duration>,
) -> Result<Inspection> {
    // The clock of the key's node (all three names share its hash tag): in
    // a cluster a keyless TIME would go to any node.
    let slot = redis_keyslot(Names::new(prefix, key).lock.as_bytes());
    let time: Vec<String> = run(
        limit,
        redis.custom(
            CustomCommand::new_static("TIME", ClusterHash::Custom(slot), false),
            Vec::<Value>::new(),
        ),
    )
    .await?;
    let now_ms = server_ms(&time)?;
    let mut states = Vec::new();
    for names in [
        Names::new(prefix, key),
        Names::semaphore(prefix, key),
        Names::rw(prefix, key, Kind::Read),
    ] {
        if let Some(state) = read_one(redis, &names, now_ms, limit).await? {
            states.push(state);
        }
    }
    name_clients(redis, prefix, &mut states, limit).await;
    Ok(Inspection {
        key: key.to_owned(),
        states,
    })
}

/// Fill in who each hold, reservation and queue entry belongs to: one
/// `GET` of each client's record (`crate::identity`), once per client.
async fn name_clients(
    redis: &fred::clients::Client,
    prefix: &str,
    states: &mut [State],
    limit: Option<Duration>,
) {
    let mut known: HashMap<String, Who> = HashMap::new();
    let mut ids: Vec<String> = Vec::new();
    for s in states.iter() {
        ids.extend(
            s.holders
                .iter()
                .filter_map(|h| client_of_token(&h.token).map(str::to_owned)),
        );
        ids.extend(s.reservations.iter().map(|r| r.client.clone()));
        ids.extend(s.queue.iter().map(|q| q.client.clone()));
    }
    for id in ids {
        if known.contains_key(&id) {
            continue;
        }
        // A record that cannot be read (an ACL without it, a value that is
        // not a string, a timeout) leaves the client shown by its id.
        let record: Option<String> = run(limit, redis.get(crate::identity::key(prefix, &id)))
            .await
            .ok()
            .flatten();
        let (started, name) = match record.as_deref().and_then(crate::identity::parse) {
            Some((started, name)) => (Some(started), Some(name)),
            None => (None, None),
        };
        let who = Who {
            id: id.clone(),
            name,
            started,
        };
        known.insert(id, who);
    }
    let who = |id: &str| known.get(id).cloned();
    for s in states.iter_mut() {
        for h in &mut s.holders {
            h.who = client_of_token(&h.token).and_then(who);
        }
        for r in &mut s.reservations {
            r.who = who(&r.client);
        }
        for q in &mut s.queue {
            q.who = who(&q.client);
        }
    }
}

/// A lock whose value is gone but whose record lives (protocol 4 deletes a
/// lock freed with nobody waiting): free, with the record's counter as its
/// last fence. `None` for anything else.
async fn free_lock(
    redis: &fred::clients::Client,
    names: &Names,
    limit: Option<Duration>,
) -> Result<Option<State>> {
    if names.kind != Kind::Mutex {
        return Ok(None);
    }
    let counter: Option<u64> = run(limit, redis.hget(names.record(), "f")).await?;
    Ok(counter.map(|last_fence| State {
        redis_key: names.lock.to_string(),
        last_fence,
        ..empty(Primitive::Mutex)
    }))
}

/// When fencing token `fence` was issued: it is the server's clock in µs
/// then. A fence outside 2020 to 2200 is not taken for a time.
fn issued(fence: u64) -> Option<SystemTime> {
    const FROM: u64 = 1_577_836_800_000_000; // 2020-01-01
    const TO: u64 = 7_258_118_400_000_000; // 2200-01-01
    (FROM..TO)
        .contains(&fence)
        .then(|| UNIX_EPOCH + Duration::from_micros(fence))
}

fn server_ms(time: &[String]) -> Result<i64> {
    let parse = |i: usize| time.get(i).and_then(|s| s.parse::<i64>().ok());
    match (parse(0), parse(1)) {
        (Some(s), Some(us)) => Ok(s * 1000 + us / 1000),
        _ => Err(Error::UnexpectedReply(format!("TIME: {time:?}"))),
    }
}

fn empty(primitive: Primitive) -> State {
    State {
        primitive,
        redis_key: String::new(),
        foreign: false,
        holders: Vec::new(),
        reservations: Vec::new(),
        queue: Vec::new(),
        last_fence: 0,
        used: None,
        subscribers: Vec::new(),
    }
}

/// A lock's value (`head|queue|void`, or a fast-path hold's token alone,
/// see [`crate::scripts`]), its `PTTL` and its record's counter.
fn parse_lock(value: &str, pttl: i64, counter: u64) -> State {
    let mut state = empty(Primitive::Mutex);
    state.last_fence = counter;
    let fields: Vec<&str> = value.split('|').collect();
    let digits = |f: &str| f.bytes().all(|b| b.is_ascii_digit());
    // The scripts' own test (`scripts::ACQUIRE`): one field of a token's
    // shape (a fast-path hold), or three with `void` digits.
    let (head, queue) = match fields[..] {
        [token] if crate::token::client_of(token).is_some() => (token, ""),
        [head, queue, void] if !head.is_empty() && digits(void) => (head, queue),
        _ => {
            state.foreign = true;
            return state;
        }
    };
    let left = |ms: i64| Duration::from_millis(ms.max(0) as u64);
    if let Some(fence) = head.strip_prefix('-') {
        state.last_fence = state.last_fence.max(fence.parse().unwrap_or(0));
    } else if let Some(reserved) = head.strip_prefix('~') {
        let parts: Vec<&str> = reserved.split(':').collect();
        if let [client, fence, keep] = parts[..] {
            state.last_fence = state.last_fence.max(fence.parse().unwrap_or(0));
            let remaining = pttl - keep.parse::<i64>().unwrap_or(0);
            if remaining > 0 {
                state.reservations.push(Reservation {
                    client: client.to_owned(),
                    permits: 1,
                    remaining: left(remaining),
                    writer: false,
                    who: None,
                });
            }
        }
    } else {
        // `<token>:<fence>`, or a fast-path hold's `<token>`, whose fence is
        // the record's counter: nothing issues a fence while a lock is held
        // (0 when the record is gone).
        let (token, fencing_token) = match head.rsplit_once(':') {
            Some((token, fence)) => (token, fence.parse().unwrap_or(0)),
            None => (head, counter),
        };
        state.last_fence = state.last_fence.max(fencing_token);
        state.holders.push(Holder {
            token: token.to_owned(),
            fencing_token,
            remaining: left(pttl),
            permits: 1,
            writer: false,
            who: None,
            since: crate::token::made_at(token),
        });
    }
    state.queue = queue
        .split(',')
        .filter(|c| !c.is_empty())
        .map(|c| Queued {
            client: c.to_owned(),
            permits: 1,
            limit: None,
            writer: false,
            waiting: None,
            who: None,
        })
        .collect();
    state
}

/// A semaphore's or read-write lock's value (`used|fence|queue|ring|void`),
/// its expiry index (member, expiry ms) and facts, at server time `now_ms`.
fn parse_counted(
    primitive: Primitive,
    value: &str,
    holds: &[(String, f64)],
    facts: &HashMap<String, String>,
    now_ms: i64,
) -> State {
    let mut state = empty(primitive);
    let fields: Vec<&str> = value.split('|').collect();
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if fields.len() != 5
        || !number(fields[0])
        || !number(fields[1])
        || !fields[4].bytes().all(|b| b.is_ascii_digit())
    {
        state.foreign = true;
        return state;
    }
    state.used = fields[0].parse().ok();
    state.last_fence = fields[1].parse().unwrap_or(0);
    let rw = primitive == Primitive::RwLock;
    for (member, expiry) in holds {
        let left = *expiry as i64 - now_ms;
        if left <= 0 {
            continue; // expired: the next script call cuts it
        }
        let remaining = Duration::from_millis(left as u64);
        let fact = facts.get(member).map(String::as_str).unwrap_or("");
        if let Some(client) = member.strip_prefix('~') {
            let permits = fact.parse().unwrap_or(0);
            let (client, writer) = role(client, rw);
            state.reservations.push(Reservation {
                client,
                permits,
                remaining,
                writer,
                who: None,
            });
        } else {
            let (n, fence) = fact.split_once(':').unwrap_or(("0", "0"));
            let permits: u32 = n.parse().unwrap_or(0);
            let fencing_token = fence.parse().unwrap_or(0);
            state.holders.push(Holder {
                token: member.clone(),
                fencing_token,
                remaining,
                permits,
                writer: rw && permits == RW_WRITE,
                who: None,
                since: issued(fencing_token),
            });
        }
    }
    for entry in fields[2].split(',').filter(|e| !e.is_empty()) {
        let parts: Vec<&str> = entry.split(':').collect();
        if let [client, want, limit] = parts[..] {
            let (client, writer) = role(client, rw);
            state.queue.push(Queued {
                client,
                permits: want.parse().unwrap_or(0),
                limit: (!rw).then(|| limit.parse().unwrap_or(0)),
                writer,
                waiting: None,
                who: None,
            });
        }
    }
    state
}

/// A queue or reservation id: a read-write lock's writers queue as
/// `<client>.w`.
fn role(id: &str, rw: bool) -> (String, bool) {
    match id.strip_suffix(".w") {
        Some(client) if rw => (client.to_owned(), true),
        _ => (id.to_owned(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_held_queued_reserved_free_or_foreign() {
        let s = parse_lock("tok:17|a,b|", 900, 18);
        assert_eq!(s.holders.len(), 1);
        assert_eq!(s.holders[0].token, "tok");
        assert_eq!(s.holders[0].fencing_token, 17);
        assert_eq!(s.holders[0].remaining, Duration::from_millis(900));
        assert_eq!(
            s.queue
                .iter()
                .map(|q| q.client.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(s.last_fence, 18, "the record's counter");
        // A fast-path hold: the token alone, its fence the record's counter.
        let tok = "0123456789abcdef-0000000000000001";
        let s = parse_lock(tok, 900, 18);
        assert_eq!(
            (s.holders[0].token.as_str(), s.holders[0].fencing_token),
            (tok, 18)
        );
        assert_eq!(s.last_fence, 18);
        let s = parse_lock(&format!("{tok}|a|"), 900, 18);
        assert_eq!((s.holders[0].token.as_str(), s.queue.len()), (tok, 1));
        let s = parse_lock("~c:17:60000|b|", 60_030, 0);
        assert!(s.holders.is_empty());
        assert_eq!(s.reservations[0].client, "c");
        assert_eq!(s.reservations[0].remaining, Duration::from_millis(30));
        // A lapsed reservation stands for a free lock.
        assert!(parse_lock("~c:17:60000||", 59_000, 0)
            .reservations
            .is_empty());
        let s = parse_lock("-17||", 5000, 0);
        assert!(s.holders.is_empty() && s.queue.is_empty() && !s.foreign);
        assert_eq!(s.last_fence, 17);
        assert!(parse_lock("", 5000, 0).foreign);
        assert!(parse_lock("someone-else", 5000, 0).foreign);
        assert!(parse_lock("a|b|c|d", 5000, 0).foreign);
        assert!(parse_lock("a:1||x", 5000, 0).foreign);
    }

    #[test]
    fn a_semaphore_and_a_read_write_lock() {
        let facts: HashMap<String, String> = [
            ("t1", "2:100"),
            ("t2", "1:101"),
            ("~c", "3"),
            ("gone", "1:99"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
        let holds = vec![
            ("gone".to_owned(), 999.0),
            ("t1".to_owned(), 1500.0),
            ("t2".to_owned(), 3000.0),
            ("~c".to_owned(), 1050.0),
        ];
        let s = parse_counted(
            Primitive::Semaphore,
            "6|101|d:1:8,e:2:8||",
            &holds,
            &facts,
            1000,
        );
        assert_eq!(s.used, Some(6));
        assert_eq!(s.holders.len(), 2, "the expired hold is not shown");
        assert_eq!(s.holders[0].permits, 2);
        assert_eq!(s.holders[0].fencing_token, 100);
        assert_eq!(s.holders[0].remaining, Duration::from_millis(500));
        assert_eq!(s.reservations[0].permits, 3);
        assert_eq!(s.queue[1].client, "e");
        assert_eq!(s.queue[1].permits, 2);
        assert_eq!(s.queue[1].limit, Some(8));
        let w = RW_WRITE.to_string();
        let facts: HashMap<String, String> = [("w1".to_owned(), format!("{w}:5"))].into();
        let s = parse_counted(
            Primitive::RwLock,
            &format!("{w}|5|r:4:{w},x.w:{w}:{w}||"),
            &[("w1".to_owned(), 2000.0)],
            &facts,
            1000,
        );
        assert!(s.holders[0].writer);
        assert_eq!(s.queue[0].client, "r");
        assert!(!s.queue[0].writer);
        assert_eq!(s.queue[1].client, "x");
        assert!(s.queue[1].writer);
        assert!(parse_counted(Primitive::Semaphore, "x|1|||", &[], &HashMap::new(), 0).foreign);
    }
}
