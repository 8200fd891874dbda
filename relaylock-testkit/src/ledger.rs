//! The guarded resource of the safety tests, independent of the lock: a
//! ledger on a redis-server of its own that no fault touches. It rejects a
//! fencing token lower than the last one it accepted (a stale write), and
//! records an *overlap* whenever a writer enters while another writer of the
//! same key is still inside. For a semaphore, the counted mode
//! ([`Ledger::enter_counted`]) records instead every entry that brings the
//! permits inside above the limit, and the most ever inside.

use std::sync::Arc;

use fred::prelude::*;
use fred::types::scripts::Script;

use crate::{Admin, RedisServer};

/// KEYS: `[ledger hash, inside set, accepted tokens list]`; ARGV: `[fence,
/// writer, enter]`. `enter == '1'`: the writer enters (an overlap if
/// somebody else is inside) and writes; `'0'`: a second write of the same
/// critical section, which may repeat the last accepted token. Replies 1
/// accepted, 0 stale. Tokens accepted on entering are appended to the list.
const WRITE: &str = r#"
local enter = ARGV[3] == '1'
if enter then
  redis.call('SADD', KEYS[2], ARGV[2])
  if redis.call('SCARD', KEYS[2]) > 1 then redis.call('HINCRBY', KEYS[1], 'overlaps', 1) end
end
local last = tonumber(redis.call('HGET', KEYS[1], 'last') or '0')
local fence = tonumber(ARGV[1])
if fence < last or (fence == last and enter) then
  redis.call('HINCRBY', KEYS[1], 'stale', 1)
  return 0
end
redis.call('HSET', KEYS[1], 'last', ARGV[1])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
if enter then redis.call('RPUSH', KEYS[3], ARGV[1]) end
return 1
"#;

/// KEYS: `[ledger hash, inside counter]`; ARGV: `[permits, limit]`. Adds
/// the permits to those inside; counts `over` when that exceeds the limit,
/// and keeps the most ever inside (`max`).
const ENTER_COUNTED: &str = r#"
local inside = redis.call('INCRBY', KEYS[2], ARGV[1])
if inside > tonumber(ARGV[2]) then redis.call('HINCRBY', KEYS[1], 'over', 1) end
if inside > tonumber(redis.call('HGET', KEYS[1], 'max') or '0') then redis.call('HSET', KEYS[1], 'max', inside) end
redis.call('HINCRBY', KEYS[1], 'entered', 1)
return inside
"#;

/// The ledger, on its own redis-server (stopped with it), or a connection to
/// one started elsewhere (for a writer in another process).
pub struct Ledger {
    db: Client,
    write: Script,
    counted: Script,
    url: String,
    _server: Option<RedisServer>,
}

/// What the ledger counted for some keys.
#[derive(Debug, Default, Clone, Copy)]
pub struct Totals {
    /// Writes accepted.
    pub accepted: u64,
    /// Writes rejected for a token lower than one already accepted.
    pub stale: u64,
    /// Entries while another writer of the same key was inside.
    pub overlaps: u64,
    /// Counted mode: entries that brought the permits inside above the
    /// limit.
    pub over_limit: u64,
    /// Counted mode: the most permits ever inside at once.
    pub max_inside: u64,
    /// Counted mode: entries.
    pub entered: u64,
}

impl Ledger {
    /// Start a ledger on a redis-server of its own.
    pub async fn start() -> Arc<Ledger> {
        let server = RedisServer::start();
        let db = server.admin().await;
        Arc::new(Ledger {
            db,
            write: Script::from_lua(WRITE),
            counted: Script::from_lua(ENTER_COUNTED),
            url: server.url(),
            _server: Some(server),
        })
    }

    /// A writer's connection to the ledger at `url` (started by
    /// [`start`](Self::start) in another process).
    pub async fn connect(url: &str) -> Ledger {
        let db = Builder::from_config(Config::from_url(url).unwrap())
            .build()
            .unwrap();
        db.init().await.expect("ledger connection");
        Ledger {
            db,
            write: Script::from_lua(WRITE),
            counted: Script::from_lua(ENTER_COUNTED),
            url: url.to_owned(),
            _server: None,
        }
    }

    /// The ledger server's URL (for writers in other processes).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// Write `fence` for `key` as `writer`; `enter` for the first write of a
    /// critical section. Returns whether the write was accepted.
    pub async fn write(&self, key: &str, fence: u64, writer: &str, enter: bool) -> bool {
        let keys = vec![
            format!("ledger:{key}"),
            format!("inside:{key}"),
            format!("tokens:{key}"),
        ];
        let args = vec![
            fence.to_string(),
            writer.to_owned(),
            if enter { "1" } else { "0" }.to_owned(),
        ];
        let accepted: i64 = self
            .write
            .evalsha_with_reload(&self.db, keys, args)
            .await
            .expect("ledger write");
        accepted == 1
    }

    /// `writer` leaves the critical section of `key`.
    pub async fn leave(&self, key: &str, writer: &str) {
        let _: i64 = self
            .db
            .srem(format!("inside:{key}"), writer)
            .await
            .expect("ledger leave");
    }

    /// Counted mode: `permits` enter the section of `key`, whose limit is
    /// `limit`. Returns the permits now inside.
    pub async fn enter_counted(&self, key: &str, permits: u32, limit: u32) -> u64 {
        let keys = vec![format!("ledger:{key}"), format!("inside-n:{key}")];
        let args = vec![permits.to_string(), limit.to_string()];
        self.counted
            .evalsha_with_reload(&self.db, keys, args)
            .await
            .expect("ledger enter")
    }

    /// Counted mode: `permits` leave the section of `key`.
    pub async fn leave_counted(&self, key: &str, permits: u32) {
        let _: i64 = self
            .db
            .incr_by(format!("inside-n:{key}"), -i64::from(permits))
            .await
            .expect("ledger leave");
    }

    /// The counts of `keys`, added up (`max_inside`: the largest).
    pub async fn totals(&self, keys: &[impl AsRef<str>]) -> Totals {
        let mut t = Totals::default();
        for k in keys {
            let h: std::collections::HashMap<String, u64> = self
                .db
                .hgetall(format!("ledger:{}", k.as_ref()))
                .await
                .unwrap();
            t.accepted += h.get("accepted").copied().unwrap_or(0);
            t.stale += h.get("stale").copied().unwrap_or(0);
            t.overlaps += h.get("overlaps").copied().unwrap_or(0);
            t.over_limit += h.get("over").copied().unwrap_or(0);
            t.entered += h.get("entered").copied().unwrap_or(0);
            t.max_inside = t.max_inside.max(h.get("max").copied().unwrap_or(0));
        }
        t
    }

    /// The tokens of `key` accepted on entering, in the order accepted.
    pub async fn tokens(&self, key: &str) -> Vec<u64> {
        self.db
            .lrange(format!("tokens:{key}"), 0, -1)
            .await
            .unwrap()
    }
}
