//! The script calls: acquire, release, and renew (one lock for `extend`, a
//! batch for the watchdog). The one place that sends relaylock's scripts to
//! Redis; the acquire loop, the guard and the watchdog call down into it.
//!
//! Every call is bounded by the command timeout (fred's own when the client
//! has one, else a timer here). A call cut short may still run in Redis: the
//! callers that care arm their own clean-up (an abandoned acquisition is
//! released, an abandoned shortening `extend` keeps the shorter lease record).

use std::future::Future;
use std::time::Duration;

use fred::clients::Client;
use fred::types::scripts::Script;
use fred::types::{FromValue, Value};

use crate::error::{with_timeout, Error, Result};
use crate::scripts::{evalsha_reloading, Names, Scripts, HANDOFF_GRACE_MS, RING_CHARS};

/// The acquire script's reply, checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken, with this fencing token; with the remaining lease when the
    /// token already held the lock (a replay, or a hand-over found by a
    /// re-check: its lease started before this call).
    Acquired(u64, Option<Duration>),
    /// Held by another owner for about this long.
    Held(Duration),
}

/// Interpret the acquire script's reply. The remaining lease is
/// `default_lease` when Redis reports none (`-1`: a key without expiry, so
/// relaylock did not write it; `-2`: a void marker): re-check after that.
pub(crate) fn acquire_reply(reply: &[i64], default_lease: Duration) -> Result<AcquireReply> {
    match reply {
        // The third element (`others`) is for clients that want it.
        [1, fence] | [1, fence, 0 | 1] if *fence > 0 => {
            Ok(AcquireReply::Acquired(*fence as u64, None))
        }
        [1, fence, 0 | 1, pttl] if *fence > 0 => Ok(AcquireReply::Acquired(
            *fence as u64,
            // No expiry cannot happen for a lock relaylock holds; treat it
            // as a lease that is all there.
            u64::try_from(*pttl).ok().map(Duration::from_millis),
        )),
        [0, pttl] => Ok(AcquireReply::Held(
            u64::try_from(*pttl).map_or(default_lease, Duration::from_millis),
        )),
        other => Err(Error::UnexpectedReply(format!("acquire replied {other:?}"))),
    }
}

/// What the release script found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Released our lock: it is free now (no other client was queued; the
    /// caller wakes its own local waiters).
    Freed,
    /// Released our lock and reserved it for another queued client, which
    /// was told.
    HandedOver,
    /// Released our lock and gave it to the local waiter's token the call
    /// named (`next`), with this fencing token.
    Granted(u64),
    /// Our key was already released by an earlier (replayed) call.
    Already,
    /// The key no longer held our token.
    NotOurs,
}

/// Parse the release script's reply.
pub(crate) fn release_reply(reply: &[i64]) -> Result<Released> {
    Ok(match reply {
        [1] => Released::Freed,
        [3] => Released::HandedOver,
        [4, fence] if *fence > 0 => Released::Granted(*fence as u64),
        [2] => Released::Already,
        [0] => Released::NotOurs,
        other => return Err(Error::UnexpectedReply(format!("release replied {other:?}"))),
    })
}

/// The KEYS of `ACQUIRE` (and the first three of `RELEASE`): `[lock, void, voids]`.
fn lock_keys<'a>(names: &'a Names, void: &'a str, voids: &'a str) -> Vec<&'a str> {
    vec![names.lock.as_str(), void, voids]
}

/// One lock of a watchdog renewal batch.
pub(crate) struct RenewItem<'a> {
    pub(crate) lock: &'a str,
    pub(crate) token: &'a str,
    pub(crate) lease_ms: u64,
}

/// The command connection and the scripts, with the settings every call
/// needs. Cheap to clone (fred clients are handles).
#[derive(Clone)]
pub(crate) struct Calls {
    redis: Client,
    scripts: Scripts,
    /// `Some(limit)` when relaylock bounds each command itself: the fred
    /// client enforces no timeout (one passed in with `fred_client`).
    limit: Option<Duration>,
    side_retention_ms: u64,
    /// `PUBLISH`, or `SPUBLISH` with sharded pub/sub (Redis Cluster 7+);
    /// a static string, shared by every call, not copied.
    publish: Value,
}

impl Calls {
    pub(crate) fn new(
        redis: Client,
        scripts: Scripts,
        limit: Option<Duration>,
        side_retention_ms: u64,
        publish: &'static str,
    ) -> Self {
        Calls {
            redis,
            scripts,
            limit,
            side_retention_ms,
            publish: Value::String(fred::util::static_str(publish)),
        }
    }

    /// The command connection.
    pub(crate) fn redis(&self) -> &Client {
        &self.redis
    }

    /// Await a fred command, bounded by the command timeout.
    pub(crate) async fn run<T>(
        &self,
        command: impl Future<Output = Result<T, fred::error::Error>>,
    ) -> Result<T> {
        match self.limit {
            None => Ok(command.await?),
            Some(limit) => Ok(with_timeout(limit, command).await?),
        }
    }

    /// Call `script` ([`evalsha_reloading`]), bounded by the command
    /// timeout.
    async fn script<'a, R, F>(&self, conn: &Client, script: &Script, make: F) -> Result<R>
    where
        R: FromValue,
        F: Fn() -> (Vec<&'a str>, Vec<Value>),
    {
        self.run(evalsha_reloading(conn, script, make)).await
    }

    /// One [`ACQUIRE`](crate::scripts::ACQUIRE) call, its raw reply (check it
    /// with [`acquire_reply`] once the call's outcome is known). `client` is
    /// this client's id for a caller that will wait (it queues, and may take
    /// a reservation), `""` otherwise.
    pub(crate) async fn acquire(
        &self,
        names: &Names,
        token: &str,
        lease_ms: u64,
        client: &str,
    ) -> Result<Vec<i64>> {
        let (void, voids) = (names.void(token), names.voids());
        self.script(&self.redis, &self.scripts.acquire, || {
            let args: Vec<Value> = vec![
                token.into(),
                (lease_ms as i64).into(),
                client.into(),
                names.channel.as_str().into(),
                self.publish.clone(),
            ];
            (lock_keys(names, &void, &voids), args)
        })
        .await
    }

    /// One [`RELEASE`](crate::scripts::RELEASE) call for `token`. `fence` is
    /// `None` for an acquisition whose reply never arrived (the script reads
    /// the fence from the value). `client` is this client's id; `requeue`
    /// says it still has local waiters (it queues again, at the back).
    pub(crate) async fn release(
        &self,
        names: &Names,
        token: &str,
        fence: Option<u64>,
        client: &str,
        requeue: bool,
        next: Option<(&str, u64, bool)>,
    ) -> Result<Released> {
        let (void, voids) = (names.void(token), names.voids());
        // With no `next`, any name of the lock's slot: the script reads it
        // only for a `next`.
        let next_void = next.map(|(t, _, _)| names.void(t));
        let reply: Vec<i64> = self
            .script(&self.redis, &self.scripts.release, || {
                let (next_token, next_lease, keep) = next.unwrap_or(("", 0, false));
                let args: Vec<Value> = vec![
                    token.into(),
                    // `''` (unknown) is the empty string; a fence goes as an
                    // integer, which Lua reads as its digits.
                    fence.map_or_else(|| "".into(), |f| Value::Integer(f as i64)),
                    names.channel.as_str().into(),
                    (self.side_retention_ms as i64).into(),
                    (RING_CHARS as i64).into(),
                    client.into(),
                    (HANDOFF_GRACE_MS as i64).into(),
                    self.publish.clone(),
                    if requeue { "1" } else { "0" }.into(),
                    next_token.into(),
                    (next_lease as i64).into(),
                    if keep { "1" } else { "0" }.into(),
                ];
                let mut keys = lock_keys(names, &void, &voids);
                keys.push(next_void.as_deref().unwrap_or(voids.as_str()));
                (keys, args)
            })
            .await?;
        release_reply(&reply)
    }

    pub(crate) async fn set_lease(
        &self,
        conn: &Client,
        names: &Names,
        token: &str,
        lease_ms: u64,
    ) -> Result<Vec<i64>> {
        self.script(conn, &self.scripts.renew, || {
            let args: Vec<Value> = vec![
                "0".into(), // not grow-only
                token.into(),
                (lease_ms as i64).into(),
            ];
            (vec![names.lock.as_str()], args)
        })
        .await
    }

    /// One grow-only [`RENEW`](crate::scripts::RENEW) call for a batch of
    /// locks (all in one slot, in a cluster): one code per lock, in order.
    pub(crate) async fn renew(&self, batch: &[RenewItem<'_>]) -> Result<Vec<i64>> {
        self.script(&self.redis, &self.scripts.renew, || {
            let mut keys: Vec<&str> = Vec::with_capacity(batch.len());
            let mut args: Vec<Value> = Vec::with_capacity(batch.len() * 2 + 1);
            // Grow only: a renewal racing an `extend` never shortens the lease.
            args.push("1".into());
            for r in batch {
                keys.push(r.lock);
                args.push(r.token.into());
                args.push((r.lease_ms as i64).into());
            }
            (keys, args)
        })
        .await
    }

    /// Whether the lock `names` is taken ([`PEEK`](crate::scripts::PEEK)).
    pub(crate) async fn peek(&self, names: &Names) -> Result<bool> {
        let taken: i64 = self
            .script(&self.redis, &self.scripts.peek, || {
                (vec![names.lock.as_str()], Vec::new())
            })
            .await?;
        Ok(taken == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_are_checked() {
        let lease = Duration::from_secs(30);
        for ok in [&[1, 7, 0][..], &[1, 7, 1], &[1, 7]] {
            assert_eq!(
                acquire_reply(ok, lease).unwrap(),
                AcquireReply::Acquired(7, None)
            );
        }
        assert_eq!(
            acquire_reply(&[1, 7, 0, 1500], lease).unwrap(),
            AcquireReply::Acquired(7, Some(Duration::from_millis(1500)))
        );
        assert_eq!(
            acquire_reply(&[0, 250], lease).unwrap(),
            AcquireReply::Held(Duration::from_millis(250))
        );
        // No expiry (a foreign key) or a void marker: re-check after the lease.
        assert_eq!(
            acquire_reply(&[0, -1], lease).unwrap(),
            AcquireReply::Held(lease)
        );
        assert_eq!(
            acquire_reply(&[0, -2], lease).unwrap(),
            AcquireReply::Held(lease)
        );
        for bad in [&[][..], &[1], &[1, 0], &[1, 7, 2], &[2, 1], &[0, 1, 2]] {
            assert!(acquire_reply(bad, lease).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn release_replies_are_checked() {
        assert_eq!(release_reply(&[1]).unwrap(), Released::Freed);
        assert_eq!(release_reply(&[3]).unwrap(), Released::HandedOver);
        assert_eq!(release_reply(&[4, 9]).unwrap(), Released::Granted(9));
        assert_eq!(release_reply(&[2]).unwrap(), Released::Already);
        assert_eq!(release_reply(&[0]).unwrap(), Released::NotOurs);
        for bad in [&[][..], &[4], &[4, 0], &[1, 1], &[5], &[-1]] {
            assert!(release_reply(bad).is_err(), "{bad:?}");
        }
    }
}
