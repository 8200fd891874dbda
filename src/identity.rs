//! Who a client is, for the people who run it: a name (the builder's
//! `LockClientBuilder::name`, by default `<host>:<pid>`) and
//! when it started, kept in Redis under `<prefix>:4:client:<id>` so that
//! `relaylock status` and `inspect` can say who holds a
//! lock and who waits, also after that process died (a `kill -9` leaves
//! its holds until their leases end).
//!
//! Every lock token starts with its client's id ([`crate::token`]), and
//! every queue entry is one, so nothing is written per acquisition: one
//! `SET` when the client is built, again every [`REFRESH`], living [`TTL`]:
//! longer than any lease (`MAX_LEASE`, a day), so a
//! dead client's name outlives its holds. Written with the command
//! connection's permissions: a client whose ACL refuses it still locks,
//! and shows by its id alone.
//!
//! Each client also listens on its control channel, `<prefix>:4:client:<id>:ch`:
//! an operator's unlock (`LockClient::unlock`)
//! publishes `u:<token>` there, and the client checks that hold at once
//! (its `lost()` fires within a few round trips instead of at its next
//! renewal).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fred::clients::Client;
use fred::interfaces::KeysInterface;
use fred::types::Expiration;
use tokio::task::JoinHandle;

/// How long a client's record lives after it was last written: longer
/// than the longest lease (a day).
pub(crate) const TTL: Duration = Duration::from_secs(25 * 3600);

/// How often a live client writes its record again.
pub(crate) const REFRESH: Duration = Duration::from_secs(12 * 3600);

/// The longest name a client may give itself, in bytes.
pub(crate) const MAX_NAME: usize = 256;

/// One client's identity.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    /// The client's id (16 hex digits).
    pub(crate) id: String,
    pub(crate) name: String,
    /// When the client was built, in ms since the Unix epoch.
    pub(crate) started_ms: u64,
}

impl Identity {
    pub(crate) fn new(id: String, name: String) -> Self {
        let started_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Identity {
            id,
            name,
            started_ms,
        }
    }

    /// The record's value: `<started ms> <name>`.
    fn value(&self) -> String {
        format!("{} {}", self.started_ms, self.name)
    }
}

/// The Redis name of client `id`'s record.
pub(crate) fn key(prefix: &str, id: &str) -> String {
    format!("{prefix}:{}:client:{id}", crate::scripts::PROTOCOL)
}

/// Client `id`'s control channel (see the module docs).
pub(crate) fn control_channel(prefix: &str, id: &str) -> String {
    format!("{prefix}:{}:client:{id}:ch", crate::scripts::PROTOCOL)
}

/// A record's value: when the client started and its name.
pub(crate) fn parse(value: &str) -> Option<(SystemTime, String)> {
    let (ms, name) = value.split_once(' ')?;
    let ms: u64 = ms.parse().ok()?;
    Some((UNIX_EPOCH + Duration::from_millis(ms), name.to_owned()))
}

/// `<host>:<pid>`: the host name as the kernel has it (Linux), else the
/// `HOSTNAME` variable, else `localhost`.
pub(crate) fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// Write the record, within `limit`. A failure (an ACL, a timeout) is
/// logged at debug level: the record is for operators only.
pub(crate) async fn record(redis: &Client, prefix: &str, identity: &Identity, limit: Duration) {
    let set = redis.set::<(), _, _>(
        key(prefix, &identity.id),
        identity.value(),
        Some(Expiration::PX(TTL.as_millis() as i64)),
        None,
        false,
    );
    match crate::error::with_timeout(limit, set).await {
        Ok(()) => {}
        Err(e) => {
            tracing::debug!(error = %crate::error::readable(&e), "relaylock: could not record this client's name; it shows by its id")
        }
    }
}

/// Delete the record (a clean shutdown: nothing of the client is left to
/// name), within `limit`; a failure is logged at debug level, and the
/// record expires with its TTL.
pub(crate) async fn forget(redis: &Client, prefix: &str, identity: &Identity, limit: Duration) {
    let del = redis.del::<i64, _>(key(prefix, &identity.id));
    if let Err(e) = crate::error::with_timeout(limit, del).await {
        tracing::debug!(error = %crate::error::readable(&e), "relaylock: could not delete this client's record; it expires");
    }
}

/// Write the record again every [`REFRESH`] while the client lives.
pub(crate) fn spawn_refresh(
    redis: &Client,
    prefix: &str,
    identity: Identity,
    limit: Duration,
) -> JoinHandle<()> {
    let (redis, prefix) = (redis.clone(), prefix.to_owned());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REFRESH).await;
            record(&redis, &prefix, &identity, limit).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back() {
        let i = Identity::new("0123456789abcdef".into(), "web-7:4242 blue".into());
        let (started, name) = parse(&i.value()).unwrap();
        assert_eq!(name, "web-7:4242 blue");
        assert_eq!(
            started.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64,
            i.started_ms
        );
        assert_eq!(parse("nonsense"), None);
        assert!(default_name().contains(&format!(":{}", std::process::id())));
        assert_eq!(key("p", "ab"), "p:4:client:ab");
        assert_eq!(control_channel("p", "ab"), "p:4:client:ab:ch");
    }
}
