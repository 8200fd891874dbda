//! An election's calls: the leader's proclamation and the read of who
//! leads.

use fred::bytes_utils::Str;
use fred::types::Value;

use fred::interfaces::ClientLike;
use fred::types::ClusterHash;

use super::Calls;
use crate::error::{Error, Result};
use crate::scripts::Names;

impl Calls {
    /// One [`PROCLAIM`](crate::scripts::PROCLAIM): `true` written, `false`
    /// the lock does not hold `token`.
    pub(crate) async fn proclaim(
        &self,
        names: &Names,
        token: &Str,
        value: &str,
        since_ms: u64,
        lease_ms: u64,
    ) -> Result<bool> {
        let ttl = (self.side_retention_ms + lease_ms) as i64;
        let channel = observe_channel(names);
        let reply: i64 = self
            .script(&self.redis, &self.scripts.proclaim, || {
                let args = vec![
                    Value::String(token.clone()),
                    value.into(),
                    (since_ms as i64).into(),
                    ttl.into(),
                    (lease_ms as i64).into(),
                    channel.as_str().into(),
                    self.publish.clone(),
                ];
                (vec![&names.lock], args)
            })
            .await?;
        match reply {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(Error::UnexpectedReply(format!("proclaim replied {other}"))),
        }
    }

    /// Tell an election's observers that it changed (`p` on its channel):
    /// after a resignation, which the release script does not announce.
    pub(crate) async fn announce(&self, names: &Names) -> Result<()> {
        let channel = observe_channel(names);
        let command = self.publish.as_str().unwrap_or_default().to_string();
        let publish = fred::types::CustomCommand::new(command, ClusterHash::FirstKey, false);
        let sent = self
            .redis
            .custom::<Value, Value>(publish, vec![channel.as_str().into(), "p".into()]);
        match self.limit {
            Some(limit) => crate::error::with_timeout(limit, sent).await?,
            None => sent.await?,
        };
        Ok(())
    }

    /// One [`LEADER`](crate::scripts::LEADER) read: the lock's value and
    /// its record's counter and leader fields.
    pub(crate) async fn leader(&self, names: &Names) -> Result<Vec<Value>> {
        self.script(&self.redis, &self.scripts.leader, || {
            (vec![&names.lock], Vec::<Value>::new())
        })
        .await
    }
}

/// An election's observers' channel: `<value>:obs` (its lock's hash tag,
/// so it stays in the lock's shard).
pub(crate) fn observe_channel(names: &Names) -> String {
    format!("{}{OBSERVED_SUFFIX}", names.lock)
}

/// What an election's observers' channel ends with: the subscriber looks
/// a message's channel up among the observed ones only then, so a lock's
/// release message costs no lookup more.
pub(crate) const OBSERVED_SUFFIX: &str = ":obs";

/// What an election's lock key starts with: the election `n` is the lock
/// on `election:n`.
pub(crate) const ELECTION_PREFIX: &str = "election:";

/// Whether the lock named `lock` is an election's (`<prefix>:4:{election:`).
pub(crate) fn is_election(lock: &str) -> bool {
    lock.contains(&format!(":4:{{{ELECTION_PREFIX}"))
}
