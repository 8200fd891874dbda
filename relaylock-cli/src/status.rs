//! `relaylock status`: who holds a key, for how long, who is queued and
//! since when, and who listens, read with plain read commands
//! ([`relaylock::inspect::inspect`]); with no key, a bounded `SCAN` of the prefix
//! (every primary of a cluster).

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::config::Config;
use fred::types::{Builder, Key};
use futures::StreamExt;
use relaylock::inspect::{Holder, Inspection, Primitive, State, Who};
use relaylock::Error;
use serde_json::{json, Value};

/// Exit status when the ACL user lacks a command status needs
/// (`EX_NOPERM`).
pub const NO_PERMISSION: u8 = 77;
/// Exit status when Redis cannot be reached or a read fails otherwise.
pub const REDIS: u8 = 69;

/// `relaylock status`.
#[derive(Args, Debug)]
#[command(after_help = "\
Reads only (GET, PTTL, ZRANGE, HGETALL, TIME, PUBSUB NUMSUB or SHARDNUMSUB,
SCAN): README's read-only ACL user is enough. It also reads each server's
maxmemory-policy (CONFIG GET, or INFO memory) and warns above the table when
the server may evict relaylock's keys, or when neither command is allowed.
Exit status: 0; 69 if Redis could not be reached; 77 if the ACL user lacks a
command status needs.")]
pub struct StatusArgs {
    /// The Redis URL: the global `--url` (before or after the subcommand),
    /// else `RELAYLOCK_URL`, else `redis://127.0.0.1:6379`.
    #[arg(skip)]
    pub url: String,
    /// Key prefix (the library's default).
    #[arg(long, env = "RELAYLOCK_PREFIX", default_value = "relaylock")]
    pub prefix: String,
    /// List only what is held (a holder, a reservation or a value relaylock
    /// did not write), not free names and their tombstones.
    #[arg(long)]
    pub held: bool,
    /// One JSON document per refresh, on one line.
    #[arg(long)]
    pub json: bool,
    /// Refresh once a second until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// With no KEY: list at most this many names (every name is looked at;
    /// the output says how many more there are).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Lock, semaphore or read-write lock names; none: SCAN the prefix.
    #[arg(value_parser = crate::parse::key)]
    pub keys: Vec<String>,
}

/// What `status` does, as an exit status.
pub async fn run(args: StatusArgs) -> u8 {
    // A plain connection: a LockClient would load scripts and subscribe,
    // which a read-only ACL user may not.
    let client = match connect(&args.url).await {
        Ok(c) => c,
        Err(e) => return fail(&args.url, &e),
    };
    // Whether the servers may evict relaylock's values, read once (a
    // server's policy is not re-read at every refresh of --watch).
    let memory = relaylock::eviction::read_all(&client).await;
    loop {
        match report(&client, &args, &memory).await {
            Ok(text) => {
                if args.watch && !args.json && std::io::stdout().is_terminal() {
                    // Clear the screen and go home, as watch(1) does (not
                    // into a pipe or a file).
                    print!("\x1b[2J\x1b[H");
                }
                println!("{text}");
            }
            Err(e) => return fail(&args.url, &e),
        }
        if !args.watch {
            return 0;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn connect(url: &str) -> Result<Client, Error> {
    let config = Config::from_url(url)
        .map_err(|e| Error::InvalidArgument(format!("invalid Redis URL: {}", e.details())))?;
    let client = Builder::from_config(config)
        .with_connection_config(|c| c.connection_timeout = Duration::from_secs(5))
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(5))
        .build()?;
    match tokio::time::timeout(Duration::from_secs(5), client.init()).await {
        Ok(Ok(_)) => Ok(client),
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(Error::ConnectTimeout {
            server: redacted(url),
            timeout: Duration::from_secs(5),
        }),
    }
}

/// `url` without its user and password, for messages.
pub fn redacted(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://...@{}", &url[at + 1..]),
        _ => url.to_owned(),
    }
}

fn fail(url: &str, e: &Error) -> u8 {
    let url = redacted(url);
    let text = e.to_string();
    if text.contains("NOPERM") {
        eprintln!(
            "relaylock status: permission denied on {url}: {text}\n\
             (the ACL user needs +get +pttl +zrange +hget +hgetall +time +pubsub|numsub \
             +pubsub|shardnumsub +scan: docs/security.md)"
        );
        NO_PERMISSION
    } else {
        eprintln!("relaylock status: {url}: {e}");
        REDIS
    }
}

/// One refresh; `memory`: the servers' eviction settings, warned about
/// above the table as the library's `build()` does.
async fn report(
    client: &Client,
    args: &StatusArgs,
    memory: &[relaylock::eviction::ServerMemory],
) -> Result<String, Error> {
    // Every name: the scan runs to its end, so that --held misses no
    // hold, and `--limit` bounds what is listed.
    let keys = if args.keys.is_empty() {
        scan(client, &args.prefix).await?
    } else {
        args.keys.clone()
    };
    // Names given on the command line are all listed; a scan's, up to the
    // limit. Without --held only those listed are read (a name's reads are
    // several commands); with it every name is, since any may be held.
    let scanned = args.keys.is_empty();
    let read = if scanned && !args.held {
        &keys[..keys.len().min(args.limit)]
    } else {
        &keys[..]
    };
    let mut found = inspect_all(client, &args.prefix, read, args.held).await?;
    let matched = if args.held { found.len() } else { keys.len() };
    if scanned {
        found.truncate(args.limit);
    }
    let left_out = matched - found.len();
    let sets = Annotations {
        sets: multi_key_sets(&found),
        leaders: leaders(client, &found).await,
    };
    Ok(if args.json {
        json!({
            "prefix": args.prefix,
            "truncated": left_out > 0,
            "names": keys.len(),
            "matched": matched,
            "servers": memory.iter().map(memory_json).collect::<Vec<_>>(),
            "keys": found.iter().map(|i| inspection_json(i, &sets)).collect::<Vec<_>>(),
        })
        .to_string()
    } else {
        let mut out = String::new();
        for warning in memory.iter().filter_map(|m| m.warning()) {
            let _ = writeln!(out, "warning: {warning}");
        }
        match (found.is_empty(), args.held, args.keys.as_slice()) {
            (true, true, []) => {
                let _ = writeln!(
                    out,
                    "nothing held under {}: ({} looked at)",
                    args.prefix,
                    match keys.len() {
                        1 => "the one name".to_owned(),
                        n => format!("all {n} names"),
                    }
                );
            }
            (true, true, given) => {
                let _ = writeln!(out, "nothing held: {}", given.join(", "));
            }
            (true, false, _) => {
                let _ = writeln!(out, "no relaylock names under {}:", args.prefix);
            }
            _ => {}
        }
        for i in &found {
            out.push_str(&inspection_text(i, &sets));
        }
        if left_out > 0 {
            let what = if args.held { "held names" } else { "names" };
            let _ = writeln!(
                out,
                "({left_out} more {what} not listed, of {matched}; --limit {matched} lists them)",
            );
        }
        out.trim_end().to_owned()
    })
}

/// Inspect every name (32 at a time), in the scan's order; with `held`,
/// only those with a holder, a reservation or a foreign value, each with
/// only its held states.
async fn inspect_all(
    client: &Client,
    prefix: &str,
    keys: &[String],
    held_only: bool,
) -> Result<Vec<Inspection>, Error> {
    let inspections: Vec<Result<Inspection, Error>> = futures::stream::iter(keys)
        .map(|key| relaylock::inspect::inspect(client, prefix, key))
        .buffered(32)
        .collect()
        .await;
    let mut found = Vec::with_capacity(inspections.len());
    for i in inspections {
        let mut i = i?;
        if held_only {
            i.states.retain(held);
            if i.states.is_empty() {
                continue;
            }
        }
        found.push(i);
    }
    Ok(found)
}

/// One server's eviction setting, for `--json`: `may_evict` is `null`
/// when it could not be read (`unknown` says why).
fn memory_json(m: &relaylock::eviction::ServerMemory) -> Value {
    use relaylock::eviction::Read;
    match &m.read {
        Read::Read {
            maxmemory, policy, ..
        } => json!({
            "server": m.server,
            "maxmemory": maxmemory,
            "maxmemory_policy": policy,
            "may_evict": m.may_evict(),
        }),
        Read::Unknown(why) => json!({
            "server": m.server,
            "may_evict": null,
            "unknown": why,
        }),
        _ => json!({ "server": m.server, "may_evict": m.may_evict() }),
    }
}

/// Whether `--held` lists it: a holder, a reservation about to be taken, or
/// a value relaylock did not write (which it treats as held).
fn held(s: &State) -> bool {
    s.foreign || !s.holders.is_empty() || !s.reservations.is_empty()
}

/// The user-facing names under the client's prefix, sorted: a `SCAN` of the
/// protocol's values (`<prefix>:4:{k}`, `...:sem`, `...:rw`) and of the
/// locks' records (`<prefix>:4:{k}:f`, a hash: a lock freed with nobody
/// waiting leaves only its record), every primary of a cluster, to its end.
async fn scan(redis: &Client, prefix: &str) -> Result<Vec<String>, Error> {
    let head = format!("{prefix}:{}:{{", relaylock::PROTOCOL);
    let pattern = format!("{}*", glob_escape(&head));
    let mut stream = if redis.is_clustered() {
        redis
            .scan_cluster_buffered(pattern, Some(1000), None)
            .boxed()
    } else {
        redis.scan_buffered(pattern, Some(1000), None).boxed()
    };
    let mut names = BTreeSet::new();
    while let Some(key) = stream.next().await {
        let key: Key = key?;
        let Some(key) = key.as_str() else { continue };
        if let Some(name) = user_key(key, &head) {
            names.insert(name.to_owned());
        }
    }
    Ok(names.into_iter().collect())
}

/// The name `k` of a value `<head>k}`, `<head>k}:sem` or `<head>k}:rw`, or
/// of a lock's record `<head>k}:f` (other names: channels' bookkeeping, void
/// markers, side keys: `None`).
fn user_key<'a>(redis_key: &'a str, head: &str) -> Option<&'a str> {
    let rest = redis_key.strip_prefix(head)?;
    let rest = rest
        .strip_suffix('}')
        .or_else(|| rest.strip_suffix("}:f"))
        .or_else(|| rest.strip_suffix("}:sem"))
        .or_else(|| rest.strip_suffix("}:rw"))?;
    (!rest.is_empty()).then_some(rest)
}

/// `*`, `?`, `[`, `]` and `\` of a prefix taken literally by `SCAN MATCH`.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// A duration for people: milliseconds under a second, else seconds.
pub fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// The multi-key holds among `found`: each token that holds two or more of
/// the locks listed (a multi-key lock takes every key with one token), with
/// those keys in the order listed.
fn multi_key_sets(found: &[Inspection]) -> HashMap<String, Vec<String>> {
    let mut by_token: HashMap<String, Vec<String>> = HashMap::new();
    for i in found {
        for s in i.states.iter().filter(|s| s.primitive == Primitive::Mutex) {
            for h in &s.holders {
                by_token
                    .entry(h.token.clone())
                    .or_default()
                    .push(i.key.clone());
            }
        }
    }
    by_token.retain(|_, keys| keys.len() > 1);
    by_token
}

/// The other keys a lock holder's multi-key hold took with `key` (empty
/// for a single-key hold).
fn together<'a>(sets: &'a HashMap<String, Vec<String>>, token: &str, key: &str) -> Vec<&'a str> {
    sets.get(token)
        .map(|keys| {
            keys.iter()
                .map(String::as_str)
                .filter(|k| *k != key)
                .collect()
        })
        .unwrap_or_default()
}

/// What `status` adds to the holders it lists: the keys a multi-key hold
/// took together (by token), and an election leader's value (by token).
struct Annotations {
    sets: HashMap<String, Vec<String>>,
    leaders: HashMap<String, String>,
}

/// The value each listed election's leader proclaimed (keys
/// `election:<name>`): its record's `ev`, when its `et` is the holder's
/// token; by token.
async fn leaders(client: &Client, found: &[Inspection]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for i in found.iter().filter(|i| i.key.starts_with("election:")) {
        for s in i.states.iter().filter(|s| s.primitive == Primitive::Mutex) {
            let record = format!("{}:f", s.redis_key);
            // HGETALL, which the read-only ACL of docs/security.md allows.
            let fields: Result<HashMap<String, String>, _> =
                fred::interfaces::HashesInterface::hgetall(client, record).await;
            let Ok(fields) = fields else { continue };
            if let (Some(value), Some(token)) = (fields.get("ev"), fields.get("et")) {
                if s.holders.iter().any(|h| &h.token == token) {
                    out.insert(token.clone(), value.clone());
                }
            }
        }
    }
    out
}

fn inspection_json(i: &Inspection, sets: &Annotations) -> Value {
    json!({
        "key": i.key,
        "states": i.states.iter().map(|s| state_json(s, &i.key, sets)).collect::<Vec<_>>(),
    })
}

fn state_json(s: &State, key: &str, sets: &Annotations) -> Value {
    json!({
        "primitive": s.primitive.to_string(),
        "redis_key": s.redis_key,
        "foreign": s.foreign,
        // relaylock treats a value it did not write as held.
        "held": s.foreign || !s.holders.is_empty(),
        "holders": s.holders.iter().map(|h| json!({
            "token": h.token,
            "fencing_token": h.fencing_token,
            "remaining_ms": ms(h.remaining),
            "held_ms": h.since.and_then(ago).map(ms),
            "permits": h.permits,
            "writer": h.writer,
            "client": who_json(h.who.as_ref()),
            "taken_with": together(&sets.sets, &h.token, key),
            "leader_value": sets.leaders.get(&h.token),
        })).collect::<Vec<_>>(),
        "reservations": s.reservations.iter().map(|r| json!({
            "client": r.client,
            "client_name": r.who.as_ref().and_then(|w| w.name.clone()),
            "permits": r.permits,
            "remaining_ms": ms(r.remaining),
            "writer": r.writer,
        })).collect::<Vec<_>>(),
        "queue": s.queue.iter().map(|q| json!({
            "client": q.client,
            "client_name": q.who.as_ref().and_then(|w| w.name.clone()),
            "permits": q.permits,
            "limit": q.limit,
            "writer": q.writer,
            "waiting_ms": q.waiting.map(ms),
        })).collect::<Vec<_>>(),
        "last_fence": s.last_fence,
        "used": s.used,
        "subscribers": s.subscribers.iter().map(|(c, n)| json!({"channel": c, "subscribers": n})).collect::<Vec<_>>(),
    })
}

/// How long ago `t` was, by this machine's clock (`None` for a time ahead
/// of it).
fn ago(t: SystemTime) -> Option<Duration> {
    SystemTime::now().duration_since(t).ok()
}

/// A holder's client for `--json`: its id, name and start (ms since the
/// epoch), `null` for a token that names no client.
fn who_json(who: Option<&Who>) -> Value {
    match who {
        None => Value::Null,
        Some(w) => json!({
            "id": w.id,
            "name": w.name,
            "started_ms": w.started.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(ms),
        }),
    }
}

/// A client for people: `name (id, up 2.0 h)`, or its id alone when it
/// recorded no name.
fn who_text(who: Option<&Who>, id: &str) -> String {
    match who {
        Some(Who {
            name: Some(name),
            started,
            ..
        }) => match started.and_then(ago) {
            Some(up) => format!("{name} ({id}, up {})", human(up)),
            None => format!("{name} ({id})"),
        },
        _ => id.to_owned(),
    }
}

/// A hold for people: what it is, by whom, for how long, its token, fence
/// and remaining lease.
fn holder_text(primitive: Primitive, h: &Holder) -> String {
    let what = match (primitive, h.writer) {
        (_, true) => "write".to_owned(),
        (Primitive::RwLock, false) => "read".to_owned(),
        (Primitive::Semaphore, _) => format!("{} permit(s)", h.permits),
        _ => "held".to_owned(),
    };
    let by = match (&h.who, relaylock::inspect::client_of_token(&h.token)) {
        (who, Some(id)) => format!(" by {}", who_text(who.as_ref(), id)),
        (_, None) => String::new(),
    };
    let held = h
        .since
        .and_then(ago)
        .map_or(String::new(), |d| format!(" for {}", human(d)));
    // A lock taken on the fast path whose record is gone (evicted).
    let fence = match h.fencing_token {
        0 => "known to its holder".to_owned(),
        f => f.to_string(),
    };
    format!(
        "{what}{by}{held}: token {}, fencing token {fence}, {} left",
        h.token,
        human(h.remaining)
    )
}

/// One holder's lines: the hold, the keys a multi-key hold took with it,
/// an election leader's value.
fn holder_lines(out: &mut String, primitive: Primitive, h: &Holder, key: &str, sets: &Annotations) {
    let _ = writeln!(out, "  {}", holder_text(primitive, h));
    let with = together(&sets.sets, &h.token, key);
    if !with.is_empty() {
        let _ = writeln!(out, "  taken together with: {}", with.join(", "));
    }
    if let Some(value) = sets.leaders.get(&h.token) {
        let _ = writeln!(out, "  leads the election, proclaiming: {value}");
    }
}

fn inspection_text(i: &Inspection, sets: &Annotations) -> String {
    let mut out = String::new();
    if i.states.is_empty() {
        let _ = writeln!(
            out,
            "{}: nothing in Redis (free, never used or expired)",
            i.key
        );
    }
    for s in &i.states {
        let _ = writeln!(out, "{} ({}, {})", i.key, s.primitive, s.redis_key);
        if s.foreign {
            let _ = writeln!(
                out,
                "  not relaylock's value: relaylock treats it as held by another owner"
            );
            continue;
        }
        if s.holders.is_empty() && s.reservations.is_empty() {
            let _ = writeln!(out, "  free; last fencing token {}", s.last_fence);
        }
        if let (Some(used), Primitive::Semaphore) = (s.used, s.primitive) {
            let _ = writeln!(out, "  permits used or reserved: {used}");
        }
        for h in &s.holders {
            holder_lines(&mut out, s.primitive, h, &i.key, sets);
        }
        for r in &s.reservations {
            let permits = match s.primitive {
                Primitive::Semaphore => format!(" ({} permit(s))", r.permits),
                Primitive::RwLock if !r.writer => format!(" ({} reads)", r.permits),
                _ => String::new(),
            };
            let _ = writeln!(
                out,
                "  reserved for client {}{}{permits}, {} left to take it",
                who_text(r.who.as_ref(), &r.client),
                if r.writer { " (its writers)" } else { "" },
                human(r.remaining)
            );
        }
        if s.queue.is_empty() {
            let _ = writeln!(out, "  queue: empty");
        } else {
            let _ = writeln!(
                out,
                "  queue ({} client{}, first served first):",
                s.queue.len(),
                if s.queue.len() == 1 { "" } else { "s" }
            );
        }
        for (n, q) in s.queue.iter().enumerate() {
            let role = match (s.primitive, q.writer) {
                (Primitive::RwLock, true) => " (its writers)".to_owned(),
                (Primitive::RwLock, false) => format!(" ({} readers)", q.permits),
                (Primitive::Semaphore, _) => format!(", wants {}", q.permits),
                _ => String::new(),
            };
            let waiting = q.waiting.map_or("waiting: not recorded".to_owned(), |w| {
                format!("waiting {}", human(w))
            });
            let _ = writeln!(
                out,
                "    {}. client {}{role}, {waiting}",
                n + 1,
                who_text(q.who.as_ref(), &q.client)
            );
        }
        for (channel, n) in &s.subscribers {
            let _ = writeln!(out, "  subscribers of {channel}: {n}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_the_scan() {
        let head = "relaylock:4:{";
        assert_eq!(user_key("relaylock:4:{orders:42}", head), Some("orders:42"));
        // A lock's record: a free lock used lately.
        assert_eq!(
            user_key("relaylock:4:{orders:42}:f", head),
            Some("orders:42")
        );
        assert_eq!(user_key("relaylock:4:{pay}:sem", head), Some("pay"));
        assert_eq!(user_key("relaylock:4:{cache}:rw", head), Some("cache"));
        assert_eq!(user_key("relaylock:4:{pay}:sem:h", head), None);
        assert_eq!(user_key("relaylock:4:{k}:void:tok", head), None);
        assert_eq!(user_key("relaylock:4:{k}:q", head), None);
        assert_eq!(user_key("other:4:{k}", head), None);
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
        assert_eq!(redacted("redis://u:pw@h:1/0"), "redis://...@h:1/0");
        assert_eq!(redacted("redis://h:1"), "redis://h:1");
    }
}
