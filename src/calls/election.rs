//! An election's calls: the leader's proclamation and the read of who
//! leads.

use fred::bytes_utils::Str;
use fred::types::Value;

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
    ) -> Result<bool> {
        let ttl = self.side_retention_ms as i64;
        let reply: i64 = self
            .script(&self.redis, &self.scripts.proclaim, || {
                let args = vec![
                    Value::String(token.clone()),
                    value.into(),
                    (since_ms as i64).into(),
                    ttl.into(),
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

    /// One [`LEADER`](crate::scripts::LEADER) read: the lock's value and
    /// its record's counter and leader fields.
    pub(crate) async fn leader(&self, names: &Names) -> Result<Vec<Value>> {
        self.script(&self.redis, &self.scripts.leader, || {
            (vec![&names.lock], Vec::<Value>::new())
        })
        .await
    }
}
