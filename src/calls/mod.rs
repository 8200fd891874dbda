//! The script calls: acquire, release, leave, renew (one lock for
//! `extend`, a batch for the watchdog), peek and wake. The one place that
//! sends relaylock's scripts to Redis and reads their replies; the acquire
//! loop, the release, the registry, the guard and the watchdog call down
//! into it and get typed replies back (`replies.rs`). What a call is asked
//! to do besides its script's plain work is in `terms.rs`; the rate limit of
//! the wake-up after a vanished value in `vanished.rs`.
//!
//! Every call is bounded by the command timeout (fred's own when the client
//! has one, else a timer here). A call cut short may still run in Redis: the
//! callers that care arm their own clean-up (an abandoned acquisition is
//! released, an abandoned shortening `extend` keeps the shorter lease record).

use std::sync::Arc;
use std::time::Duration;

use fred::bytes_utils::Str;
use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{FromValue, Key, Value};

use crate::error::{timed_out, Error, Result};
use crate::hold_id::HoldId;
mod election;
mod multi;
mod replies;
mod terms;
mod vanished;

pub(crate) use election::{is_election, observe_channel, ELECTION_PREFIX, OBSERVED_SUFFIX};
pub(crate) use multi::TakenRun;
pub(crate) use replies::{
    acquire_reply, release_reply, sem_release_reply, AcquireReply, Released, SemUsage, TryReply,
};
pub(crate) use terms::{HandOver, QueuePlace, ReleaseCall, TryTerms};
use vanished::Vanished;

use crate::scripts::{
    evalsha_reloading, evalsha_within, Kind, Lua, Names, Scripts, HANDOFF_GRACE_MS, RING_CHARS,
    SIDE_RETENTION_MS,
};

/// A static string argument (`"0"`, `"1"`, `""`): no copy.
fn flag(s: &'static str) -> Value {
    Value::String(fred::util::static_str(s))
}

/// The first three KEYS of `RELEASE` (as `ACQUIRE`'s): `[lock, void, voids]`,
/// the lock's name shared, not copied.
fn lock_keys(names: &Names, void: &str, voids: &str) -> Vec<Key> {
    vec![Key::from(&names.lock), void.into(), voids.into()]
}

/// One lock of a watchdog renewal batch.
pub(crate) struct RenewItem<'a> {
    /// The value's name (a lock's, or a semaphore's `...:sem`).
    pub(crate) lock: &'a str,
    pub(crate) kind: Kind,
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
    /// Whether the lock's scripts may be sent their lean argument lists,
    /// which stand for `PUBLISH` and the default retention: each argument
    /// costs Redis.
    lean_args: bool,
    /// The names [`value_vanished`](Self::value_vanished) told lately.
    vanished: Arc<Vanished>,
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls")
            .field("limit", &self.limit)
            .field("publish", &self.publish)
            .finish_non_exhaustive()
    }
}

impl Calls {
    /// The calls on `redis`, bounded by `command_timeout` (by relaylock's
    /// own timer when the fred client has no timeout of its own).
    pub(crate) fn new(
        redis: Client,
        scripts: Scripts,
        command_timeout: Duration,
        side_retention_ms: u64,
        publish: &'static str,
    ) -> Self {
        let fred_times_out = !redis.perf_config().default_command_timeout.is_zero();
        Calls {
            limit: (!fred_times_out).then_some(command_timeout),
            redis,
            scripts,
            side_retention_ms,
            publish: Value::String(fred::util::static_str(publish)),
            lean_args: publish == "PUBLISH" && side_retention_ms == SIDE_RETENTION_MS,
            vanished: Arc::default(),
        }
    }

    /// The command connection.
    pub(crate) fn redis(&self) -> &Client {
        &self.redis
    }

    /// A hold of this client on `names` (with `fence`, for a lock) was found
    /// lost while its lease, by this process's clock, still ran: only an
    /// eviction, a `FLUSHALL`, a `DEL` or an operator's unlock does that,
    /// and with the value its queue may be gone. Tell every client
    /// listening for the name to re-check ([`WAKE`](crate::scripts::WAKE)),
    /// in the background, within the command timeout. At most once per
    /// name and second, and [`MAX_WAKES`] at a time, per client: the script
    /// walks the server's channels, and a `FLUSHALL` under many holds must
    /// not become as many walks. Logged as a warning when the value really
    /// vanished (not an operator's unlock).
    pub(crate) fn value_vanished(&self, names: &Names, fence: Option<u64>, token: &Str) {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(slot) = self.vanished.admit(&names.lock) else {
            tracing::debug!(key = %names.lock, "relaylock: a hold was lost early; the waiting clients were told already, or are being told");
            return;
        };
        let calls = self.clone();
        let lock = names.lock.clone();
        let (channel, wchannel) = names.script_channels();
        let shared = if names.kind.counted() { "1" } else { "0" };
        let fence = fence.map_or_else(String::new, |f| f.to_string());
        let token = token.clone();
        handle.spawn(async move {
            let _slot = slot;
            // Bounded by the command timeout, as every script call.
            let wake = calls.script::<i64, _, _>(&calls.redis, &calls.scripts.wake, || {
                (
                    vec![&*lock],
                    vec![
                        channel.as_str().into(),
                        calls.publish.clone(),
                        shared.into(),
                        wchannel.as_str().into(),
                        fence.as_str().into(),
                        Value::String(token.clone()),
                    ],
                )
            });
            match wake.await {
                Ok(-1) => tracing::debug!(key = %lock, "relaylock: the hold was released by an operator"),
                Ok(told) => tracing::warn!(key = %lock, told, "relaylock: the value vanished before its lease ended (evicted, FLUSHALL or DEL?); told the waiting clients to re-check"),
                Err(e) => tracing::warn!(key = %lock, error = %e, "relaylock: the value vanished before its lease ended; could not tell the waiting clients, who wait out the lease they saw"),
            }
        });
    }

    /// Call `script` ([`evalsha_reloading`]), bounded by the command
    /// timeout.
    ///
    /// The command's future is awaited where it is made: handed to a helper
    /// `async fn`, it would be stored twice (an async fn keeps its arguments
    /// beside its locals), and fred's command futures are large.
    async fn script<R, K, F>(&self, conn: &Client, script: &Lua, make: F) -> Result<R>
    where
        R: FromValue,
        K: Into<Key> + Send,
        F: Fn() -> (Vec<K>, Vec<Value>),
    {
        let reply = match self.limit {
            None => evalsha_reloading(conn, script, make).await,
            Some(limit) => tokio::time::timeout(limit, evalsha_reloading(conn, script, make))
                .await
                .unwrap_or_else(|_| Err(timed_out())),
        };
        Ok(reply?)
    }

    /// [`script`](Self::script) on the command connection, within `within`
    /// when given (a waiter's deadline), but never longer than the command
    /// timeout; bounded by fred's own per-command timeout, so a call that
    /// runs out is never written later ([`evalsha_within`]).
    async fn script_within<R, K, F>(
        &self,
        script: &Lua,
        within: Option<Duration>,
        make: F,
    ) -> Result<R>
    where
        R: FromValue,
        K: Into<Key> + Send,
        F: Fn() -> (Vec<K>, Vec<Value>),
    {
        let Some(within) = within else {
            return self.script(&self.redis, script, make).await;
        };
        // The command timeout: relaylock's own bound when fred has none
        // (`limit`), else fred's.
        let limit = self
            .limit
            .unwrap_or_else(|| self.redis.perf_config().default_command_timeout);
        let limit = within.min(limit).max(Duration::from_millis(1));
        Ok(evalsha_within(&self.redis, script, limit, make).await?)
    }

    /// One [`ACQUIRE`](crate::scripts::ACQUIRE) call, its reply read
    /// ([`TryReply`]); an error only when Redis did not answer (then the
    /// script may or may not have run). `client` is this client's id for a
    /// caller that will wait (it queues, and may take a reservation), `""`
    /// otherwise.
    pub(crate) async fn acquire(
        &self,
        names: &Names,
        token: &Str,
        terms: TryTerms,
        client: &Str,
    ) -> Result<TryReply> {
        let TryTerms {
            lease_ms, within, ..
        } = terms;
        // The lean call: the lock's name alone; the script derives its void
        // marker, void index and queue-times names (each used only on a
        // rare or contended path) from it. Every name and id goes as a
        // shared buffer: no argument is copied.
        let reply: Vec<i64> = self
            .script_within(&self.scripts.acquire, within, || {
                let mut args: Vec<Value> = vec![
                    Value::String(token.clone()),
                    (lease_ms as i64).into(),
                    Value::String(client.clone()),
                ];
                // The script's defaults stand for the channel (the lock's
                // `...:ch`), `PUBLISH` and the default retention.
                if !self.lean_args || terms.exact {
                    args.extend([
                        Value::String(names.channel.clone()),
                        self.publish.clone(),
                        (self.side_retention_ms as i64).into(),
                    ]);
                }
                if terms.exact {
                    args.push(flag("1"));
                }
                (vec![&names.lock], args)
            })
            .await?;
        Ok(TryReply::of_lock(&reply, terms.default_lease))
    }

    /// One [`RELEASE`](crate::scripts::RELEASE) call for `hold` (whose
    /// `fence` is `None` for an acquisition whose reply never arrived: the
    /// script reads the fence from the value). `client` is this client's
    /// id; `call` what else the script does (see [`ReleaseCall`]).
    ///
    /// With the outcome, whether this client is the stand-by of a hand-over
    /// to another client (queued first behind it): no message tells it so,
    /// the caller arms the grace probe itself.
    pub(crate) async fn release(
        &self,
        hold: &HoldId,
        client: &Str,
        call: ReleaseCall<'_>,
    ) -> Result<(Released, bool)> {
        let (names, token, fence) = (&hold.names, &hold.token, hold.fence);
        let ReleaseCall {
            requeue,
            next,
            record,
        } = call;
        // The common release (fence known, no `next`) sends the lock's name
        // alone and no `next` arguments: the script reads the marker names
        // only to void an abandoned token or to check `next`'s marker, and
        // every argument costs Redis.
        let lean = fence.is_some() && next.is_none() && record;
        let (void, voids) = if lean {
            (String::new(), String::new())
        } else {
            (names.void(token), names.voids())
        };
        // With no `next`, any name of the lock's slot: the script reads it
        // only for a `next`.
        let next_void = next.map(|n| names.void(n.token));
        let reply: Vec<i64> = self
            .script(&self.redis, &self.scripts.release, || {
                let fence_arg = fence.map_or_else(|| flag(""), |f| Value::Integer(f as i64));
                let requeue_arg = flag(if requeue { "1" } else { "0" });
                if lean && self.lean_args {
                    // The four-argument call: the script's defaults stand
                    // for the channel, retention, ring, grace and `PUBLISH`.
                    let args = vec![
                        Value::String(token.clone()),
                        fence_arg,
                        Value::String(client.clone()),
                        requeue_arg,
                    ];
                    return (vec![Key::from(&names.lock)], args);
                }
                let mut args: Vec<Value> = vec![
                    Value::String(token.clone()),
                    // `''` (unknown) is the empty string; a fence goes as an
                    // integer, which Lua reads as its digits.
                    fence_arg,
                    Value::String(names.channel.clone()),
                    (self.side_retention_ms as i64).into(),
                    Value::String(client.clone()),
                    (HANDOFF_GRACE_MS as i64).into(),
                    self.publish.clone(),
                    requeue_arg,
                ];
                if lean {
                    return (vec![Key::from(&names.lock)], args);
                }
                let next = next.unwrap_or(HandOver {
                    token: "",
                    lease_ms: 0,
                    keep: false,
                });
                args.extend([
                    next.token.into(),
                    (next.lease_ms as i64).into(),
                    flag(if next.keep { "1" } else { "0" }),
                ]);
                if !record {
                    args.push(flag("0"));
                }
                let mut keys = lock_keys(names, &void, &voids);
                keys.push(next_void.as_deref().unwrap_or(voids.as_str()).into());
                (keys, args)
            })
            .await?;
        Ok((release_reply(&reply)?, reply == [5]))
    }

    /// Set one hold's remaining lease to `lease_ms` (not grow-only), on
    /// `conn`: one code, `[1]` set, `[0]` or `[-1]` gone.
    pub(crate) async fn set_lease(
        &self,
        conn: &Client,
        names: &Names,
        token: &str,
        lease_ms: u64,
    ) -> Result<Vec<i64>> {
        if names.kind.counted() {
            let item = RenewItem {
                lock: &names.lock,
                kind: names.kind,
                token,
                lease_ms,
            };
            return self.sem_renew(conn, &[item], "0").await;
        }
        self.script(conn, &self.scripts.renew, || {
            let args: Vec<Value> = vec![
                "0".into(), // not grow-only
                (self.side_retention_ms as i64).into(),
                token.into(),
                (lease_ms as i64).into(),
            ];
            (vec![&*names.lock], args)
        })
        .await
    }

    /// The write a `min_replicas` check waits for, on `conn`: renew the hold
    /// only if it is exactly this acquisition's (a lock's head
    /// `token:fence`; a semaphore or read-write hold's facts `permits:fence`),
    /// to at least `lease_ms` and never shorter, always writing
    /// ([`RENEW`](crate::scripts::RENEW) and
    /// [`SEM_RENEW`](crate::scripts::SEM_RENEW) mode `'2'`). One code, `[1]`
    /// renewed.
    pub(crate) async fn confirm_lease(
        &self,
        conn: &Client,
        names: &Names,
        token: &str,
        (permits, fence): (u32, u64),
        lease_ms: u64,
    ) -> Result<Vec<i64>> {
        if names.kind.counted() {
            let hold = format!("{token}|{permits}:{fence}");
            let item = RenewItem {
                lock: &names.lock,
                kind: names.kind,
                token: &hold,
                lease_ms,
            };
            return self.sem_renew(conn, &[item], "2").await;
        }
        let head = format!("{token}:{fence}");
        self.script(conn, &self.scripts.renew, || {
            let args: Vec<Value> = vec![
                "2".into(), // exact head, at least this lease, always a write
                (self.side_retention_ms as i64).into(),
                head.as_str().into(),
                (lease_ms as i64).into(),
            ];
            (vec![&*names.lock], args)
        })
        .await
    }

    /// One grow-only [`RENEW`](crate::scripts::RENEW) call for a batch of
    /// locks (all in one slot, in a cluster): one code per lock, in order.
    /// All items must be of one kind (the watchdog's chunks are).
    pub(crate) async fn renew(&self, batch: &[RenewItem<'_>]) -> Result<Vec<i64>> {
        if batch.first().is_some_and(|r| r.kind.counted()) {
            return self.sem_renew(&self.redis, batch, "1").await;
        }
        self.script(&self.redis, &self.scripts.renew, || {
            let mut keys: Vec<&str> = Vec::with_capacity(batch.len());
            let mut args: Vec<Value> = Vec::with_capacity(batch.len() * 2 + 2);
            // Grow only: a renewal racing an `extend` never shortens the lease.
            args.push("1".into());
            args.push((self.side_retention_ms as i64).into());
            for r in batch {
                keys.push(r.lock);
                args.push(r.token.into());
                args.push((r.lease_ms as i64).into());
            }
            (keys, args)
        })
        .await
    }

    /// One [`SEM_RENEW`](crate::scripts::SEM_RENEW) call for semaphore
    /// holds (all in one slot, in a cluster): one code per hold. `mode`:
    /// `"0"` exact, `"1"` grow-only, `"2"` the `min_replicas` write (the
    /// items' tokens then carry `|<n>:<fence>`).
    async fn sem_renew(
        &self,
        conn: &Client,
        batch: &[RenewItem<'_>],
        mode: &'static str,
    ) -> Result<Vec<i64>> {
        let side: Vec<(String, String)> = batch.iter().map(|r| Names::side_of(r.lock)).collect();
        self.script(conn, &self.scripts.sem_renew, || {
            let mut keys: Vec<&str> = Vec::with_capacity(batch.len() * 3);
            let mut args: Vec<Value> = Vec::with_capacity(batch.len() * 2 + 2);
            args.push(mode.into());
            args.push((self.side_retention_ms as i64).into());
            for (r, (holds, facts)) in batch.iter().zip(&side) {
                keys.extend([r.lock, holds.as_str(), facts.as_str()]);
                args.push(r.token.into());
                args.push((r.lease_ms as i64).into());
            }
            (keys, args)
        })
        .await
    }

    /// One [`SEM_ACQUIRE`](crate::scripts::SEM_ACQUIRE) call for `n` of
    /// `limit` permits, its reply read ([`TryReply`]; the script's `{1,
    /// fence, left, ...}` or `{0, bound ms}`), as for
    /// [`acquire`](Self::acquire); `place`: how the caller stands in the
    /// queue; `batch`: other local readers' tokens (and leases) to take
    /// permits for in the same call.
    pub(crate) async fn sem_acquire(
        &self,
        names: &Names,
        token: &str,
        (n, limit): (u32, u32),
        terms: TryTerms,
        place: QueuePlace<'_>,
        batch: &[(&str, u64)],
    ) -> Result<TryReply> {
        let TryTerms {
            lease_ms, within, ..
        } = terms;
        let QueuePlace {
            client,
            more,
            want,
            fresh,
        } = place;
        let (holds, facts) = names.side();
        let (void, voids) = (names.void(token), names.voids());
        let since = names.queue_times();
        let (channel, wchannel) = names.script_channels();
        let reply: Vec<i64> = self
            .script_within(&self.scripts.sem_acquire, within, || {
                let args: Vec<Value> = vec![
                    token.into(),
                    i64::from(n).into(),
                    i64::from(limit).into(),
                    (lease_ms as i64).into(),
                    client.into(),
                    (self.side_retention_ms as i64).into(),
                    channel.as_str().into(),
                    self.publish.clone(),
                    (HANDOFF_GRACE_MS as i64).into(),
                    if more { "1" } else { "0" }.into(),
                    i64::from(want).into(),
                    wchannel.as_str().into(),
                    if fresh { "1" } else { "0" }.into(),
                ];
                let mut args = args;
                for (token, lease_ms) in batch {
                    args.push((*token).into());
                    args.push((*lease_ms as i64).into());
                }
                let keys = vec![&*names.lock, &holds, &facts, &void, &voids, &since];
                (keys, args)
            })
            .await?;
        Ok(TryReply::of_semaphore(&reply, terms.default_lease))
    }

    /// One [`SEM_RELEASE`](crate::scripts::SEM_RELEASE) call for `hold`
    /// (`fence` as for [`release`](Self::release)); `requeue`: this client
    /// still has local waiters, the largest of which needs `n` permits
    /// under `limit`. Returns the outcome and how many local waiters to
    /// wake ([`sem_release_reply`]).
    /// `record` as for [`ReleaseCall::record`].
    pub(crate) async fn sem_release(
        &self,
        hold: &HoldId,
        client: &str,
        requeue: Option<(u32, u32)>,
        record: bool,
    ) -> Result<(Released, u32, bool)> {
        let (names, token, fence) = (&hold.names, &*hold.token, hold.fence);
        let (holds, facts) = names.side();
        let (void, voids) = (names.void(token), names.voids());
        let (channel, wchannel) = names.script_channels();
        let reply: Vec<i64> = self
            .script(&self.redis, &self.scripts.sem_release, || {
                let (n, limit) = requeue.unwrap_or((1, 1));
                let mut args: Vec<Value> = vec![
                    token.into(),
                    fence.map_or_else(|| "".into(), |f| Value::Integer(f as i64)),
                    channel.as_str().into(),
                    (self.side_retention_ms as i64).into(),
                    (RING_CHARS as i64).into(),
                    client.into(),
                    (HANDOFF_GRACE_MS as i64).into(),
                    self.publish.clone(),
                    if requeue.is_some() { "1" } else { "0" }.into(),
                    i64::from(n).into(),
                    i64::from(limit).into(),
                    wchannel.as_str().into(),
                ];
                if !record {
                    args.push("0".into());
                }
                let keys = vec![&*names.lock, &holds, &facts, &void, &voids];
                (keys, args)
            })
            .await?;
        sem_release_reply(&reply)
    }

    /// Take `client` out of the queue of `names` ([`LEAVE`](crate::scripts::LEAVE),
    /// or [`SEM_LEAVE`](crate::scripts::SEM_LEAVE) for a semaphore or a
    /// read-write lock, whose leave names both of its channels, walks the
    /// queue and may tell the clients it reserves for).
    ///
    /// `idle` is read each time the command is made (again after a
    /// `NOSCRIPT`): when it says no local task waits, none of this client's
    /// tries can run between this call and Redis on this connection, so a
    /// live reservation for the client is nobody's and the script frees it
    /// at once; otherwise it is left to the waiter, or lapses.
    pub(crate) async fn leave(
        &self,
        names: &Names,
        client: &Str,
        idle: impl Fn() -> bool,
    ) -> Result<()> {
        let (channel, wchannel) = names.script_channels();
        let (holds, facts) = names.side();
        let (lock, voids) = (&*names.lock, names.voids());
        let semaphore = names.kind.counted();
        let script = if semaphore {
            &self.scripts.sem_leave
        } else {
            &self.scripts.leave
        };
        self.script::<i64, _, _>(&self.redis, script, || {
            let client = Value::String(client.clone());
            let free = flag(if idle() { "1" } else { "0" });
            if !semaphore {
                let args = vec![client, channel.as_str().into(), self.publish.clone(), free];
                return (vec![lock], args);
            }
            let keys = vec![lock, &holds, &facts, &voids, &voids];
            let args = vec![
                client,
                channel.as_str().into(),
                self.publish.clone(),
                (HANDOFF_GRACE_MS as i64).into(),
                wchannel.as_str().into(),
                free,
            ];
            (keys, args)
        })
        .await
        .map(drop)
    }

    /// The semaphore's usage ([`SEM_PEEK`](crate::scripts::SEM_PEEK)).
    pub(crate) async fn sem_peek(&self, names: &Names) -> Result<SemUsage> {
        let (holds, facts) = names.side();
        let reply: Vec<i64> = self
            .script(&self.redis, &self.scripts.sem_peek, || {
                (vec![&*names.lock, &holds, &facts], Vec::new())
            })
            .await?;
        match reply.as_slice() {
            [used, queued] if *used >= 0 && *queued >= 0 => Ok(SemUsage {
                used: *used as u64,
                queued: *queued as u64,
            }),
            other => Err(Error::UnexpectedReply(format!(
                "the semaphore's value is not relaylock's (peek replied {other:?})"
            ))),
        }
    }

    /// Whether the lock `names` is taken ([`PEEK`](crate::scripts::PEEK)).
    pub(crate) async fn peek(&self, names: &Names) -> Result<bool> {
        let taken: i64 = self
            .script(&self.redis, &self.scripts.peek, || {
                (vec![&*names.lock], Vec::new())
            })
            .await?;
        Ok(taken == 1)
    }
}
