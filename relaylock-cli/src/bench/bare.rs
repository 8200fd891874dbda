//! The baseline of `relaylock bench --strategy bare:<ms>`: the lock the
//! seeds describe, as a user would write it instead of relaylock, on the
//! same fred client. `SET key token NX PX lease`, retried every interval
//! until it succeeds; release by the seeds' compare-and-delete script. No
//! fencing token, no queue, no waiting machinery: the floor of what a lock
//! costs Redis per acquisition.
//!
//! And `--strategy floor:<ms>`: the cheapest lock that keeps relaylock's
//! fencing guarantee, to price the floor of any script-based protocol in
//! real traffic. Acquire is one script, `GET`, `TIME`, `SET`: a fencing
//! token from the server clock, raised above the last one a release left in
//! the key's tombstone, so it keeps increasing whatever the clock does while
//! the tombstone lives.
//! Release is one script, `GET`, `SET`: compare the token, leave the
//! tombstone. Nothing else: no queue, no hand-over, no replay record, no
//! void markers; retried every interval like the bare lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::clients::Client;
use fred::interfaces::KeysInterface;
use fred::types::scripts::Script;
use fred::types::{Expiration, SetOptions};

/// The seeds' release script, as they give it.
pub const RELEASE: &str = r#"
if redis.call("get", KEYS[1]) == ARGV[1] then
    return redis.call("del", KEYS[1])
else
    return 0
end
"#;

/// `floor:<ms>`'s acquire: KEYS `[lock]`, ARGV `[token, lease_ms]`; the
/// fencing token, or 0 when held.
pub const FLOOR_ACQUIRE: &str = r#"
local v = redis.call('GET', KEYS[1])
local last = 0
if v then
  if string.byte(v, 1) ~= 45 then return 0 end
  last = tonumber(string.sub(v, 2)) or 0
end
local t = redis.call('TIME')
local f = tonumber(t[1]) * 1000000 + tonumber(t[2])
if last >= f then f = last + 1 end
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. string.format('%d', f), 'PX', ARGV[2])
return f
"#;

/// `floor:<ms>`'s release: KEYS `[lock]`, ARGV `[token, retention_ms]`; 1
/// released (the tombstone `-<fence>` left), 0 not held.
pub const FLOOR_RELEASE: &str = r#"
local v = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if v and string.sub(v, 1, #mine) == mine then
  redis.call('SET', KEYS[1], '-' .. string.sub(v, #mine + 1), 'PX', ARGV[2])
  return 1
end
return 0
"#;

/// The bare lock of several keys (`--keys-per-lock`), as node-redlock and
/// bsm/redislock take them: every key set or none, in one script (`MSETNX`
/// with a lease). KEYS the locks; ARGV `[token, lease_ms]`; 1 taken, 0 one
/// of them is held.
pub const BARE_ACQUIRE_ALL: &str = r#"
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
"#;

/// Its release: each key deleted if it holds the token; the number deleted.
pub const BARE_RELEASE_ALL: &str = r#"
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
"#;

/// How long `floor:<ms>`'s tombstone lives (relaylock's default retention).
const FLOOR_RETENTION_MS: i64 = 60_000;

/// The bare lock (or the fenced floor) on one fred client.
pub struct BareLock {
    redis: Client,
    release: Script,
    /// `floor:<ms>`: its acquire script (the release is its own too).
    fenced: Option<Script>,
    lease_ms: u64,
    every: Duration,
    /// `SET NX` calls so far: the attempts of this strategy.
    pub attempts: AtomicU64,
    acquire_all: Script,
    release_all: Script,
}

impl BareLock {
    /// `fenced`: `floor:<ms>` instead of `bare:<ms>`.
    pub fn new(redis: Client, lease: Duration, every: Duration, fenced: bool) -> Self {
        BareLock {
            redis,
            release: Script::from_lua(if fenced { FLOOR_RELEASE } else { RELEASE }),
            fenced: fenced.then(|| Script::from_lua(FLOOR_ACQUIRE)),
            lease_ms: lease.as_millis() as u64,
            every,
            attempts: AtomicU64::new(0),
            acquire_all: Script::from_lua(BARE_ACQUIRE_ALL),
            release_all: Script::from_lua(BARE_RELEASE_ALL),
        }
    }

    /// Take every lock of `keys` (Redis names) or none, retrying every
    /// interval; returns the token it holds them with.
    pub async fn lock_all(
        &self,
        keys: &[String],
        token: String,
    ) -> Result<String, fred::error::Error> {
        loop {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            let taken: i64 = self
                .acquire_all
                .evalsha_with_reload(
                    &self.redis,
                    keys.to_vec(),
                    vec![token.clone(), self.lease_ms.to_string()],
                )
                .await?;
            if taken == 1 {
                return Ok(token);
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// Release the locks of `keys` that still hold `token`; `false` when
    /// any did not.
    pub async fn unlock_all(
        &self,
        keys: &[String],
        token: &str,
    ) -> Result<bool, fred::error::Error> {
        let n: i64 = self
            .release_all
            .evalsha_with_reload(&self.redis, keys.to_vec(), vec![token])
            .await?;
        Ok(n == keys.len() as i64)
    }

    /// Take the lock on `key` (a Redis name), retrying every interval;
    /// returns the token it holds it with.
    pub async fn lock(&self, key: &str, token: String) -> Result<String, fred::error::Error> {
        loop {
            self.attempts.fetch_add(1, Ordering::Relaxed);
            if let Some(acquire) = &self.fenced {
                let fence: i64 = acquire
                    .evalsha_with_reload(
                        &self.redis,
                        vec![key],
                        vec![token.clone(), self.lease_ms.to_string()],
                    )
                    .await?;
                if fence > 0 {
                    return Ok(token);
                }
                tokio::time::sleep(self.every).await;
                continue;
            }
            let set: Option<String> = self
                .redis
                .set(
                    key,
                    token.as_str(),
                    Some(Expiration::PX(self.lease_ms as i64)),
                    Some(SetOptions::NX),
                    false,
                )
                .await?;
            if set.is_some() {
                return Ok(token);
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// Release `key` if it still holds `token`; `false` when it did not
    /// (the lease ran out).
    pub async fn unlock(&self, key: &str, token: &str) -> Result<bool, fred::error::Error> {
        let n: i64 = if self.fenced.is_some() {
            let retention = FLOOR_RETENTION_MS.to_string();
            self.release
                .evalsha_with_reload(&self.redis, vec![key], vec![token, retention.as_str()])
                .await?
        } else {
            self.release
                .evalsha_with_reload(&self.redis, vec![key], vec![token])
                .await?
        };
        Ok(n == 1)
    }
}
