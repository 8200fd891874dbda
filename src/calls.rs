//! The script calls: acquire, release, and renew (one lock for `extend`, a
//! batch for the watchdog). The one place that sends relaylock's scripts to
//! Redis and reads their replies; the acquire loop, the guard and the
//! watchdog call down into it and get typed replies back.
//!
//! Every call is bounded by the command timeout (fred's own when the client
//! has one, else a timer here). A call cut short may still run in Redis: the
//! callers that care arm their own clean-up (an abandoned acquisition is
//! released, an abandoned shortening `extend` keeps the shorter lease record).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::bytes_utils::Str;
use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{FromValue, Key, Value};

use crate::error::{timed_out, Error, Result};
use crate::hold_id::HoldId;
use crate::scripts::{
    evalsha_reloading, evalsha_within, Kind, Lua, Names, Scripts, HANDOFF_GRACE_MS,
    LOCK_RING_CHARS, RING_CHARS, SIDE_RETENTION_MS,
};

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
        [fence] if *fence > 0 => Ok(AcquireReply::Acquired(*fence as u64, None)),
        // The third element (`others`) is for clients that want it.
        [1, fence, 0 | 1, pttl] if *fence > 0 => Ok(AcquireReply::Acquired(
            *fence as u64,
            // No expiry cannot happen for a lock relaylock holds; treat it
            // as a lease that is all there.
            u64::try_from(*pttl).ok().map(Duration::from_millis),
        )),
        // Refused: `-3 - pttl`.
        [refused] if *refused < 0 => Ok(AcquireReply::Held(
            u64::try_from(-3 - *refused).map_or(default_lease, Duration::from_millis),
        )),
        other => Err(Error::UnexpectedReply(format!("acquire replied {other:?}"))),
    }
}

/// Interpret the semaphore acquire's reply, in the lock's terms: `{1,
/// fence, left}` taken, `{0, bound}` not admitted (re-check after `bound` ms, the
/// soonest expiry among the holds), `{0, -1}` the value is not relaylock's.
pub(crate) fn sem_acquire_reply(reply: &[i64], default_lease: Duration) -> Result<AcquireReply> {
    match reply {
        [0, -1] => Err(Error::UnexpectedReply(
            "the semaphore's value was not written by relaylock".into(),
        )),
        [1, fence, _, remaining, ..] if *fence > 0 => Ok(AcquireReply::Acquired(
            *fence as u64,
            u64::try_from(*remaining).ok().map(Duration::from_millis),
        )),
        [1, fence] | [1, fence, _] if *fence > 0 => Ok(AcquireReply::Acquired(*fence as u64, None)),
        [0, bound] => Ok(AcquireReply::Held(
            u64::try_from(*bound).map_or(default_lease, Duration::from_millis),
        )),
        other => Err(Error::UnexpectedReply(format!(
            "semaphore acquire replied {other:?}"
        ))),
    }
}

/// What a batched semaphore acquire gave each of the batch's tokens, in
/// order: its fence and the hold's remaining lease (a hold the token
/// already had may have started earlier), `None` when it was not admitted;
/// empty when the caller was not admitted.
fn sem_batch_fences(reply: &[i64]) -> Vec<Option<(u64, Duration)>> {
    let admitted = |fence: i64, remaining: i64| {
        (fence > 0).then(|| {
            let remaining = u64::try_from(remaining).unwrap_or(0);
            (fence as u64, Duration::from_millis(remaining))
        })
    };
    match reply {
        [1, _, _, _, rest @ ..] => rest.chunks_exact(2).map(|p| admitted(p[0], p[1])).collect(),
        _ => Vec::new(),
    }
}

/// Whether an admitted semaphore acquire left part of this client's
/// reservation reserved (`{1, fence, left}` with `left > 0`): another local
/// waiter may take it.
fn sem_reservation_left(reply: &[i64]) -> bool {
    matches!(reply, [1, _, left, ..] if *left > 0)
}

/// What a [`RELEASE`](crate::scripts::RELEASE) call does besides
/// releasing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseCall<'a> {
    /// This client still has local waiters: it queues again, at the back.
    pub(crate) requeue: bool,
    /// A local waiter to give the lock to at once when no other client is
    /// queued.
    pub(crate) next: Option<HandOver<'a>>,
    /// False for an operator's release ([`unlock`](crate::unlock)): the
    /// fence does not join the ring of released fences, so the holder's
    /// own later release reports the loss instead of a replay.
    pub(crate) record: bool,
}

/// The local waiter a release names to be given the lock (see
/// `crate::state::handoff`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandOver<'a> {
    /// The waiter's token.
    pub(crate) token: &'a str,
    /// Its lease.
    pub(crate) lease_ms: u64,
    /// This client stays queued after giving the lock: other local tasks
    /// still wait.
    pub(crate) keep: bool,
}

/// What one try (an [`ACQUIRE`](crate::scripts::ACQUIRE) or
/// [`SEM_ACQUIRE`](crate::scripts::SEM_ACQUIRE) call that Redis answered)
/// found: the acquire loop reads nothing else of the reply.
#[derive(Debug)]
pub(crate) enum TryReply {
    /// Taken, with this fencing token.
    Acquired {
        fence: u64,
        /// The hold's remaining lease when the token already held it (a
        /// replay, a hand-over found by a re-check, or a hold another
        /// reader's batch took for it): its lease started before this call.
        remaining: Option<Duration>,
        /// A semaphore: part of this client's reservation is left, for
        /// another local waiter to take.
        reservation_left: bool,
        /// A reader's batch: what each of the batch's tokens got, in the
        /// order sent (see [`sem_batch_fences`]).
        batch: Vec<Option<(u64, Duration)>>,
    },
    /// Held by another owner (or not admitted): re-check after about this
    /// long.
    Held(Duration),
    /// Redis answered something the scripts never return, or the
    /// semaphore's value is not relaylock's: the call's error. No token of
    /// a batch was admitted.
    Unusable(Error),
}

impl TryReply {
    /// The acquire script's reply ([`acquire_reply`]).
    fn of_lock(reply: &[i64], default_lease: Duration) -> Self {
        match acquire_reply(reply, default_lease) {
            Ok(AcquireReply::Acquired(fence, remaining)) => TryReply::Acquired {
                fence,
                remaining,
                reservation_left: false,
                batch: Vec::new(),
            },
            Ok(AcquireReply::Held(bound)) => TryReply::Held(bound),
            Err(e) => TryReply::Unusable(e),
        }
    }

    /// The semaphore acquire's reply ([`sem_acquire_reply`]), with its
    /// batch and what is left of the reservation.
    fn of_semaphore(reply: &[i64], default_lease: Duration) -> Self {
        match sem_acquire_reply(reply, default_lease) {
            Ok(AcquireReply::Acquired(fence, remaining)) => TryReply::Acquired {
                fence,
                remaining,
                reservation_left: sem_reservation_left(reply),
                batch: sem_batch_fences(reply),
            },
            Ok(AcquireReply::Held(bound)) => TryReply::Held(bound),
            Err(e) => TryReply::Unusable(e),
        }
    }

    /// What the batch's tokens got (empty unless acquired).
    pub(crate) fn batch(&self) -> &[Option<(u64, Duration)>] {
        match self {
            TryReply::Acquired { batch, .. } => batch,
            TryReply::Held(_) | TryReply::Unusable(_) => &[],
        }
    }
}

/// The terms of one try ([`Calls::acquire`], [`Calls::sem_acquire`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TryTerms {
    /// The lease a hold it takes gets, in ms.
    pub(crate) lease_ms: u64,
    /// What is left of the caller's deadline: it bounds the call (fred's
    /// own timeout: a call that runs out is never written later).
    pub(crate) within: Option<Duration>,
    /// The re-check bound of a refusal when Redis reports no expiry (a key
    /// relaylock did not write, a void marker).
    pub(crate) default_lease: Duration,
}

/// How a semaphore try stands in the queue ([`Calls::sem_acquire`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueuePlace<'a> {
    /// This client's id (its role's) for a caller that will wait: it
    /// queues, and may take a reservation; `""` otherwise.
    pub(crate) client: &'a str,
    /// Other local waiters want permits: an admitted client keeps its
    /// place in the queue.
    pub(crate) more: bool,
    /// The largest need among this client's local waiters.
    pub(crate) want: u32,
    /// The caller must not take its client's reservation (a reader arriving
    /// behind its client's waiters, for whom the reservation was made).
    pub(crate) fresh: bool,
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

/// Parse the release script's reply (one integer).
pub(crate) fn release_reply(reply: &[i64]) -> Result<Released> {
    Ok(match reply {
        [1] => Released::Freed,
        [3 | 5] => Released::HandedOver,
        [granted] if *granted < 0 => Released::Granted(granted.unsigned_abs()),
        [2] => Released::Already,
        [0] => Released::NotOurs,
        other => return Err(Error::UnexpectedReply(format!("release replied {other:?}"))),
    })
}

/// Parse the semaphore release's reply into the lock's terms, with how
/// many local waiters the caller wakes: `Freed` when the releaser's own
/// client got a reservation (wake 1, it takes it) or the permits are free
/// (wake up to the permits released, `u32::MAX` here); `HandedOver` when
/// clients ahead of it wait (wake none).
pub(crate) fn sem_release_reply(reply: &[i64]) -> Result<(Released, u32, bool)> {
    // How many local waiters `fits` asks for, and whether the releaser's
    // own client got a new reservation (the caller arms the grace timer).
    let wake = |fits: i64| match fits {
        1 => Some((1, true)),
        2 => Some((u32::MAX, false)),
        3 => Some((u32::MAX, true)),
        0 => Some((0, false)),
        _ => None,
    };
    let parsed = match reply {
        [1, told, fits] if *told >= 0 => wake(*fits).map(|(n, own)| {
            let released = if n == 0 {
                Released::HandedOver
            } else {
                Released::Freed
            };
            (released, n, own)
        }),
        // A replay: the first run's reply (and its wake-ups) was lost.
        [2, fits] => wake(*fits).map(|(_, own)| (Released::Already, u32::MAX, own)),
        [0, fits] => wake(*fits).map(|(n, own)| (Released::NotOurs, n, own)),
        _ => None,
    };
    parsed.ok_or_else(|| Error::UnexpectedReply(format!("semaphore release replied {reply:?}")))
}

/// A semaphore's permits, as [`SEM_PEEK`](crate::scripts::SEM_PEEK) sees
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SemUsage {
    /// Permits held or reserved (expired holds not counted).
    pub(crate) used: u64,
    /// Clients queued for permits.
    pub(crate) queued: u64,
}

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

/// Most [`WAKE`](crate::scripts::WAKE) calls a client has in flight.
pub(crate) const MAX_WAKES: usize = 4;

/// What [`Calls::value_vanished`] sent lately: each name at most once a
/// second, [`MAX_WAKES`] at a time.
#[derive(Default)]
struct Vanished {
    /// Name -> when it was last told; pruned of entries over a second old
    /// when it grows past 64, and never over 1,024.
    recent: std::sync::Mutex<std::collections::HashMap<Str, Instant>>,
    in_flight: AtomicUsize,
}

/// A [`WAKE`](crate::scripts::WAKE) call's place among the [`MAX_WAKES`].
pub(crate) struct WakeSlot(Arc<Vanished>);

impl Drop for WakeSlot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Vanished {
    const AGAIN: Duration = Duration::from_secs(1);

    /// A place for a call about `name`, or `None` when it was told within
    /// the last second or [`MAX_WAKES`] calls are in flight.
    fn admit(self: &Arc<Self>, name: &Str) -> Option<WakeSlot> {
        let now = Instant::now();
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent
                .get(name)
                .is_some_and(|at| now.duration_since(*at) < Self::AGAIN)
            {
                return None;
            }
            if recent.len() >= 64 {
                recent.retain(|_, at| now.duration_since(*at) < Self::AGAIN);
            }
            if recent.len() >= 1024 {
                return None;
            }
            recent.insert(name.clone(), now);
        }
        if self.in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_WAKES {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(WakeSlot(Arc::clone(self)))
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
    pub(crate) fn value_vanished(&self, names: &Names, fence: Option<u64>) {
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
                if !self.lean_args {
                    args.extend([
                        Value::String(names.channel.clone()),
                        self.publish.clone(),
                        (self.side_retention_ms as i64).into(),
                    ]);
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
                    (LOCK_RING_CHARS as i64).into(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_are_checked() {
        let lease = Duration::from_secs(30);
        assert_eq!(
            acquire_reply(&[7], lease).unwrap(),
            AcquireReply::Acquired(7, None)
        );
        assert_eq!(
            acquire_reply(&[1, 7, 0, 1500], lease).unwrap(),
            AcquireReply::Acquired(7, Some(Duration::from_millis(1500)))
        );
        // Refused: `-3 - pttl`.
        assert_eq!(
            acquire_reply(&[-253], lease).unwrap(),
            AcquireReply::Held(Duration::from_millis(250))
        );
        assert_eq!(
            acquire_reply(&[-3], lease).unwrap(),
            AcquireReply::Held(Duration::ZERO)
        );
        // No expiry (a foreign key) or a void marker: re-check after the lease.
        assert_eq!(
            acquire_reply(&[-2], lease).unwrap(),
            AcquireReply::Held(lease)
        );
        assert_eq!(
            acquire_reply(&[-1], lease).unwrap(),
            AcquireReply::Held(lease)
        );
        for bad in [
            &[][..],
            &[0],
            &[1, 0],
            &[1, 7],
            &[1, 7, 0],
            &[0, 250],
            &[1, 7, 2, 5],
            &[0, 1, 2],
        ] {
            assert!(acquire_reply(bad, lease).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn semaphore_acquire_replies_are_read_with_a_batch() {
        let lease = Duration::from_secs(30);
        // Admitted, 1 of the reservation left, a 10 s hold, two batch tokens.
        let reply = [1, 7, 1, 10_000, 8, 10_000, 0, 0];
        assert_eq!(
            sem_acquire_reply(&reply, lease).unwrap(),
            AcquireReply::Acquired(7, Some(Duration::from_secs(10)))
        );
        assert!(
            sem_reservation_left(&reply),
            "a reservation left is read with a batch too"
        );
        assert_eq!(
            sem_batch_fences(&reply),
            vec![Some((8, Duration::from_secs(10))), None]
        );
        assert!(!sem_reservation_left(&[1, 7, 0, 10_000, 8, 10_000]));
        assert!(sem_batch_fences(&[0, 50]).is_empty());
        assert_eq!(
            sem_acquire_reply(&[0, 50], lease).unwrap(),
            AcquireReply::Held(Duration::from_millis(50))
        );
        assert!(sem_acquire_reply(&[0, -1], lease).is_err());
    }

    #[test]
    fn try_replies_are_typed() {
        let lease = Duration::from_secs(30);
        let TryReply::Acquired {
            fence,
            remaining,
            reservation_left,
            batch,
        } = TryReply::of_lock(&[1, 7, 0, 1500], lease)
        else {
            panic!("taken");
        };
        assert_eq!(fence, 7);
        assert_eq!(remaining, Some(Duration::from_millis(1500)));
        assert!(!reservation_left && batch.is_empty());
        assert!(matches!(
            TryReply::of_lock(&[-253], lease),
            TryReply::Held(d) if d == Duration::from_millis(250)
        ));
        assert!(matches!(
            TryReply::of_lock(&[1, 0], lease),
            TryReply::Unusable(Error::UnexpectedReply(_))
        ));

        let reply = TryReply::of_semaphore(&[1, 7, 1, 10_000, 8, 4_000, 0, 0], lease);
        assert_eq!(
            reply.batch(),
            [Some((8, Duration::from_secs(4))), None].as_slice()
        );
        assert!(matches!(
            reply,
            TryReply::Acquired {
                fence: 7,
                remaining: Some(r),
                reservation_left: true,
                ..
            } if r == Duration::from_secs(10)
        ));
        let held = TryReply::of_semaphore(&[0, 50], lease);
        assert!(held.batch().is_empty());
        assert!(matches!(held, TryReply::Held(d) if d == Duration::from_millis(50)));
        // Not relaylock's value: unusable, and no batch token admitted.
        let foreign = TryReply::of_semaphore(&[0, -1], lease);
        assert!(foreign.batch().is_empty());
        assert!(matches!(foreign, TryReply::Unusable(_)));
    }

    #[test]
    fn release_replies_are_checked() {
        assert_eq!(release_reply(&[1]).unwrap(), Released::Freed);
        assert_eq!(release_reply(&[3]).unwrap(), Released::HandedOver);
        assert_eq!(release_reply(&[5]).unwrap(), Released::HandedOver);
        assert_eq!(release_reply(&[-9]).unwrap(), Released::Granted(9));
        assert_eq!(release_reply(&[2]).unwrap(), Released::Already);
        assert_eq!(release_reply(&[0]).unwrap(), Released::NotOurs);
        for bad in [&[][..], &[4], &[4, 9], &[1, 1], &[6], &[3, 1]] {
            assert!(release_reply(bad).is_err(), "{bad:?}");
        }
    }
}
