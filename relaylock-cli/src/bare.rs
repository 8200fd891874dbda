//! The baseline of `relaylock bench --strategy bare:<ms>`: the lock the
//! seeds describe, as a user would write it instead of relaylock, on the
//! same fred client. `SET key token NX PX lease`, retried every interval
//! until it succeeds; release by the seeds' compare-and-delete script. No
//! fencing token, no queue, no waiting machinery: the floor of what a lock
//! costs Redis per acquisition.

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

/// The bare lock on one fred client.
pub struct BareLock {
    redis: Client,
    release: Script,
    lease_ms: u64,
    every: Duration,
    /// `SET NX` calls so far: the attempts of this strategy.
    pub attempts: AtomicU64,
}

impl BareLock {
    pub fn new(redis: Client, lease: Duration, every: Duration) -> Self {
        BareLock {
            redis,
            release: Script::from_lua(RELEASE),
            lease_ms: lease.as_millis() as u64,
            every,
            attempts: AtomicU64::new(0),
        }
    }

    /// Take the lock on `key` (a Redis name), retrying every interval;
    /// returns the token it holds it with.
    pub async fn lock(&self, key: &str, token: String) -> Result<String, fred::error::Error> {
        loop {
            self.attempts.fetch_add(1, Ordering::Relaxed);
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
        let n: i64 = self
            .release
            .evalsha_with_reload(&self.redis, vec![key], vec![token])
            .await?;
        Ok(n == 1)
    }
}
