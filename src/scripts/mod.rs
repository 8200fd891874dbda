//! Every Lua script relaylock runs, each with its contract.
//!
//! Private to the crate: the protocol is documented for auditors and for
//! clients in other languages in docs/design.md, and this module is the
//! reference for each script's contract.
//!
//! # One file per script
//!
//! A script's Lua is a file of this folder, `<name>.lua` for the constant
//! `<NAME>` (`acquire.lua` is [`ACQUIRE`]), and its contract (KEYS, ARGV,
//! the reply, what it guarantees) is the constant's doc. The semaphore
//! scripts that change state share one part, `sem_prelude.lua`, which
//! `concat!` joins to their own parts; each of those files is a fragment
//! that runs only within its script:
//!
//! ```text
//! SEM_ACQUIRE = sem_acquire_args.lua  sem_prelude.lua  sem_acquire_body.lua
//! SEM_RELEASE = sem_release_args.lua  sem_prelude.lua  sem_release_body.lua
//! SEM_LEAVE   =                       sem_prelude.lua  sem_leave_body.lua
//! ```
//!
//! A constant is its files' bytes, in that order (`every_script_is_its_files`
//! checks the table above), and Redis knows a script by the SHA-1 of those
//! bytes (`EVALSHA`): any edit of a file, a Lua comment or its empty first
//! line included, gives the script a new name on every server.
//!
//! To run a script by hand, against a scratch server (scripts write), use
//! `redis-cli --eval` from this folder: the names (KEYS) first, then a lone
//! `,`, then the arguments (ARGV). A script of fragments is run from their
//! `cat`:
//!
//! ```text
//! redis-cli --eval acquire.lua 'p:4:{k}' , tok-1 30000 client-a
//! cat sem_acquire_args.lua sem_prelude.lua sem_acquire_body.lua > /tmp/sem_acquire.lua
//! redis-cli --eval /tmp/sem_acquire.lua 'p:4:{k}:sem' 'p:4:{k}:sem:h' 'p:4:{k}:sem:t' \
//!     'p:4:{k}:sem:void:tok-1' 'p:4:{k}:sem:void' , tok-1 1 3 30000 client-a 60000 \
//!     'p:4:{k}:sem:ch' PUBLISH 50
//! ```
//!
//! `redis-cli -x SCRIPT LOAD < acquire.lua` prints the SHA-1 relaylock
//! calls the script by (`-x` sends the file whole, its last newline too).
//!
//! # Protocol 4: the fence in a record, and one short value per lock
//!
//! An uncontended acquisition is [`ACQUIRE`]'s fast path: its first command,
//! `SET p:4:{k} <token> NX PX <lease>`, takes the free lock, and its fence
//! comes from the lock's record `p:4:{k}:f` (`fence.lua`: `HGET`, `TIME`,
//! `HSET`, `PEXPIRE`). The lock's value is then its token alone: nothing is
//! parsed, nothing copied. The rest of the script runs only where the lock
//! is taken, reserved or queued for: it queues the caller (and writes the
//! queue into the value), takes a reservation or recognises a replay. Every
//! release is [`RELEASE`], whose first lines free a fast-path hold (`DEL`,
//! and the fence into the ring: `HSET`). docs/design.md, "Protocol 4", has
//! the safety argument, and why the acquisition is one script, not a
//! `MULTI` of native commands (measured).
//!
//! The lock's value at `p:4:{k}` (prefix `p`, user key `k`; the `4` is the
//! protocol version) is a token alone, or three fields separated by `|`:
//!
//! ```text
//! value = <token>                               held (fast path), nobody queued
//!       | head "|" queue "|" void
//! head  = <token> ":" <fence>                  held (by a script); the key's PX is the lease
//!       | <token>                              held (fast path), clients queued behind it
//!       | "~" <client> ":" <fence> ":" <keep>   reserved for <client> while the key's PTTL exceeds <keep> ms
//!       | "-" <fence>                           free (a tombstone): with a queue, or while a void marker may live
//! queue = "" | <client> ("," <client>)*          clients waiting, oldest first
//! void  = "" | <until>                           void markers may exist until server time <until> (ms)
//! ```
//!
//! The record `p:4:{k}:f` is a hash: `f`, the fence counter (every fence is
//! the larger of the server's `TIME` in µs and the counter plus one, see
//! `fence.lua`), and the
//! ring of released fences: fence `x` in the one-letter field of `x mod 32`
//! ([`LOCK_RING_SLOTS`]; every fence is the one before it plus one, mod 32,
//! so the slots are written in turn). It lives the lease plus the retention
//! after each acquisition and renewal: longer than every hold.
//!
//! A tombstone lives [`SIDE_RETENTION_MS`] (the builder's `side_retention`),
//! a reservation that long plus the grace, with `<keep>` the retention: once
//! the grace has passed (`PTTL <= keep`) the reservation has lapsed and the
//! value stands for a free lock. A held lock lives its lease; a lock freed
//! with nobody queued and no `void` field is deleted. Besides these, a lock
//! has one channel per waiting client, `p:4:{k}:ch:<client>`, and, on the
//! rare abandoned path only, void markers `p:4:{k}:void:<token>`. All share
//! the hash tag `{k}`, so every script stays valid in Redis Cluster.
//!
//! The common paths run few commands: an uncontended acquisition is `SET`
//! and the record's four, its release `GET`, `DEL`, `HSET`; a hand-over between
//! clients adds one or two `PUBLISH`es on the release's side and one on the
//! taker's, each to ONE client, however many wait; a hand-over within one
//! client is a single release call that gives the lock to the next local
//! waiter's token. A value that is neither a token alone nor three such
//! fields was not written by relaylock: the scripts treat it as held by
//! another owner and never rewrite it.
//!
//! # Hand-over between clients
//!
//! Every client (one [`LockClient`](crate::LockClient), usually one process)
//! has an id. A waiting client whose try fails appends its id to the queue,
//! and listens on its own channel of the lock. A release picks the first
//! queued client other than the releaser, X, reserves the lock for it for
//! [`HANDOFF_GRACE_MS`] and publishes `r:X` on X's channel: only X
//! retries, so a release costs one retry in total, and clients take turns
//! in the order they started waiting. It publishes `r:X` on the channel of
//! the client queued next too, the stand-by, which probes once the grace
//! has passed, in case X never comes (the releaser, when it is the
//! stand-by itself, learns it from the reply and needs no message). Taking
//! the lock while other clients wait publishes `t:<lease ms>` on the
//! channel of the client queued first (the stand-by), so it learns the new
//! holder's lease and its probe stands down. A client that
//! leaves the queue passes on what it would have done (see [`LEAVE`]). The
//! releaser joins the back of the queue when it still has local waiters.
//! With no other client queued, the release publishes nothing: no other
//! client waits. It gives the lock directly to a local waiter the releasing
//! client names (its token and lease), or leaves a tombstone, and then the
//! releasing client wakes its own waiters itself.
//!
//! Messages are sent with `redis.pcall`: a client whose ACL forbids the
//! channel still acquires and releases, and the waiters of other clients fall
//! back to their bounded waits (the holder's lease, the grace period).
//!
//! Lua numbers are doubles: a fencing token (at least the server's clock in
//! microseconds when a script issues it, about 1.8e15) is exact, but
//! `tostring` would print it as `1.79e+15`. Scripts
//! therefore format tokens with `string.format('%d', n)` and return them as
//! numbers, which Redis converts to integer replies exactly.

use fred::bytes_utils::Str;
use fred::clients::Client;
use fred::interfaces::LuaInterface;
use fred::types::{FromValue, Key, Value};
use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod names;
pub(crate) use names::{Kind, Names};

/// How long a free lock's value (its tombstone) and a reservation live, in
/// ms, by default (see [`LockClientBuilder::side_retention`](crate::LockClientBuilder::side_retention)).
///
/// It bounds the memory relaylock leaves behind per lock name, and it is the
/// window in which (a) a replayed release is still recognised as ours, (b) a
/// server clock stepping backwards cannot make fencing tokens go backwards,
/// and (c) a void marker lives.
pub const SIDE_RETENTION_MS: u64 = 60_000;

/// How long a released lock stays reserved for the client chosen to take it
/// next, in ms. Bounds the idle time when that client no longer has waiters.
pub const HANDOFF_GRACE_MS: u64 = 50;

/// Since when each queued client waits, for operators (`relaylock status`,
/// [`LockClient::inspect`](crate::LockClient::inspect)), not for the lock
/// paths: `<value>:q`, a hash of client id → the server time (ms) it joined
/// the queue through a refused try ([`ACQUIRE`], [`SEM_ACQUIRE`]). Written
/// only when a client joins (`TIME`, `HSET`, `PEXPIRE`, and `HLEN` when
/// `HSET` added a field, for a lock; the semaphore's script has the time
/// already: once per client per wait,
/// not per waiter), its TTL refreshed by one `PEXPIRE` on a queued client's
/// refused try; never on a release: a client the release queues again at
/// the back keeps its time, as it had waiters throughout (so the time
/// shown for such a client can be older than its current waiters). It
/// lives the retention ([`SIDE_RETENTION_MS`]) after the last join or refused try of a queued
/// client (a queued client's waiters try again at least once per holder
/// lease, the bound of every wait), so it never outlives the other
/// bookkeeping; a client that made no try for longer than the retention
/// may show no time. Past 32 fields and twice the queue's length, a join
/// that adds a field drops the fields of clients no longer queued (one pass
/// over a set of the queued ids); a client joining again only updates its
/// time, so the record grows only through joins that check it.
/// Scripts never read it, so a client that does not write it interoperates
/// (its queue entries show no time). Written with `redis.pcall`: an ACL
/// user without `HLEN`/`HKEYS` still locks, and its queue entries show no
/// time.
pub const QUEUE_TIMES: &str = ":q";

/// How many released fencing tokens a semaphore's value remembers (see
/// [`SEM_RELEASE`]; a lock's ring is in its record, [`LOCK_RING_SLOTS`]).
///
/// A replayed release is recognised as long as fewer than this many other
/// releases of the semaphore came between it and its first run.
pub const RELEASE_RING: usize = 32;

/// Acquire: every try of a lock call.
///
/// KEYS: `[lock, void, voids, since]` (`void` is this token's marker
/// `p:4:{k}:void:<token>`, `voids` the lock's `p:4:{k}:void`: until when
/// any marker may exist, for when the value is gone; `since` is
/// `p:4:{k}:q`, see [`QUEUE_TIMES`]; optional), or `[lock]` alone, the
/// lean call relaylock sends: the script then derives the three names from
/// the lock's (each is needed only on a rare or contended path, and every
/// name passed costs Redis; the derived names share the lock's hash tag, so
/// Redis Cluster accepts them: a script may touch undeclared keys of its
/// own slot). The record `p:4:{k}:f` is always derived.
/// ARGV: `[token, lease_ms, client, channel, publish, retention_ms, exact]`
/// (`exact` `'1'`: a `min_replicas` call, which takes no fast path, so the
/// value names its fence; optional), or
/// the lean `[token, lease_ms, client]` relaylock sends when the last three
/// are their defaults (each argument costs Redis; `channel` is then the
/// lock's `p:4:{k}:ch`, `publish` is `PUBLISH` and `retention_ms` 60000).
/// `publish` is `PUBLISH`, or `SPUBLISH` in Redis Cluster (sharded pub/sub:
/// the message stays within the lock's shard).
/// `channel` is the lock's `p:4:{k}:ch`; a client's own channel is
/// `<channel>:<client>`.
///
/// The reply is one integer on the common paths (an array reply costs
/// Redis about 0.5 µs more per call: a Lua table built, then converted):
/// a fencing token (`> 0`) when the call took the lock, and
/// `-3 - pttl` (`< 0`) when it did not, `pttl` being how long to wait at
/// most (`-1`: a key without expiry, `-2`: this token's void marker). Only
/// the replay answers an array, `{1, fence, others, pttl}`.
/// `client` is `''` for a caller that will not wait (try_lock, polling): it
/// neither queues nor takes a reservation.
///
/// * the lock is free, its name absent (the fast path, the common case):
///   `SET lock token NX PX lease` takes it, the value is the token alone,
///   and the fencing token comes from the record as below (not for
///   `exact`). While a void marker of the lock may live (`EXISTS voids`),
///   a token with its own marker gives the lock back at once (`DEL`) and
///   gets `-1`.
/// * a value that is not relaylock's (neither one field of a token's shape,
///   `<16 hex>-<16 hex>`, nor three with a numeric `void` field) counts as
///   held by another owner: reply
///   `-3 - pttl` (`pttl` the key's `PTTL`) and never rewrite it.
/// * head holds OUR token (a replay of this very call after a lost reply, as
///   fred does after a reconnect, or a lock a [`RELEASE`] gave this token):
///   reply `{1, fence, others, pttl}` with the stored fence, so acquiring is
///   idempotent, and the lease's remaining `PTTL` (it started before this
///   call). A head of our token alone is our own fast-path hold whose reply
///   was lost: it takes the next fence from the record, written into the
///   head (`KEEPTTL`).
/// * head holds another token (with or without its fence), or a
///   reservation for another client that has not lapsed: append `client`
///   to the queue if it waits and is not queued yet (`SET ... KEEPTTL`: the
///   lease is untouched, and a fast-path hold's token becomes the head of a
///   three-field value; not for a token whose void marker exists, `-1`; a
///   client that joins is also noted in `since`, see [`QUEUE_TIMES`]), and
///   reply `-3 - pttl`, `pttl` being the key's `PTTL` or the reservation's
///   remaining grace.
/// * otherwise the lock is free: a tombstone, a lapsed reservation, or a
///   reservation for `client`. The `void` field is the value's. If it has not passed and this token's
///   void marker exists, this token's caller gave up and already released it
///   (see [`RELEASE`]): a delayed copy of the call must not take the lock,
///   reply `-1` (`pttl = -2`). An absent key costs one `GET` of `voids`; a
///   value without a `void` field, the common case, no void command at all.
///   Else the fencing token is the larger of the server's `TIME` in µs and
///   the record's counter plus one (`HGET`), raised to `last + 1` if the
///   head's fence is equal or later, written back into the counter (`HSET`),
///   and the record lives `lease_ms + retention_ms` (`PEXPIRE`). `SET lock
///   "<token>:<fence>|<queue without client>|<void>" PX lease` (the `void`
///   field carried on until it passes); if other clients still wait,
///   publish `t:<lease>` on the channel of the first of them (the stand-by
///   of a hand-over; whoever is served next), so it learns the new holder's
///   lease. Reply `fence`.
pub const ACQUIRE: &str = concat!(include_str!("fence.lua"), include_str!("acquire.lua"));
/// Release.
///
/// KEYS: `[lock, void, voids, next_void]` (the first three as for
/// [`ACQUIRE`]; `next_void` is the void marker of `next`'s token). A release
/// that gives `fence` and no `next` may send `[lock]` alone and the first
/// eight arguments (relaylock does): the script touches the other names only
/// to void an abandoned acquisition and to check `next`'s marker. Such a
/// release may also send the lean four arguments `[token, fence, client,
/// requeue]` (relaylock does, outside Redis Cluster and with the default
/// retention): they stand for the channel `p:4:{k}:ch`, `retention_ms`
/// 60000 ([`SIDE_RETENTION_MS`]), `grace_ms` 50 ([`HANDOFF_GRACE_MS`]) and
/// `PUBLISH`.
/// ARGV: `[token, fence, channel, retention_ms, client, grace_ms, publish,
/// requeue, next, next_lease_ms, keep, record]` (`channel`, `publish` as for
/// [`ACQUIRE`]; `record` is `'0'` for an operator's release, `relaylock
/// unlock`: the fence is not written into the ring, so the holder's own
/// later release finds its fence neither held nor released and reports the
/// loss; absent otherwise).
/// `fence` is `''` when the caller does not know it: an acquisition abandoned
/// while in flight (future dropped, error, timeout). `client` is the
/// releasing client's id; `requeue` is `'1'` when it still has local waiters
/// (it queues again, at the back). `next` is the token of a local waiter of
/// the releasing client that may take the lock at once, or `''` (or absent,
/// with `next_lease_ms`, `keep` and `next_void`); `keep` is `'1'` when the
/// client has other local waiters besides `next`'s (it stays queued after
/// giving the lock to `next`).
///
/// The reply is one integer: `1` freed, `3` reserved for another client,
/// `5` reserved for another client with the caller its stand-by, `-fence'`
/// given to `next` with the fencing token `fence'`, `2` a replay, `0` lost.
///
/// * the value is our token alone (a fast-path hold, nobody queued), `fence`
///   is known and no `next` is named: `DEL` the lock, write the fence into
///   the ring of the record `p:4:{k}:f` (`HSET` of the field of its
///   remainder mod 32), reply `1`. Nothing else runs: this is the
///   common release.
/// * head holds our token (`"<token>:<f>"`, or `"<token>"` with a queue):
///   write `f` into the ring. Then hand over: if a client other than
///   `client` is queued, reserve the lock for the first of them, X (head
///   `~X:<f>:<retention_ms>`, X leaves the queue, `client` joins its back
///   if `requeue` or if it was queued, the key lives `retention_ms +
///   grace_ms`: the reservation lapses when the grace has passed) and
///   publish `r:X` on X's channel. The client queued next, the stand-by, is
///   told too: reply `5` when that is `client` itself (no message; the
///   caller arms its probe), else publish `r:X` on the stand-by's channel
///   (when there is one) and reply `3`. Otherwise, with `next` given (and
///   `fence` known), the lock goes to `next` directly, as [`ACQUIRE`] would
///   give it (unless `next`'s void marker exists while the `void` field is
///   live): a fencing token by [`ACQUIRE`]'s rule, `SET lock
///   "<next>:<fence'>|<client if keep>|<void>" PX next_lease_ms`, no message
///   (no other client waits), reply `-fence'`. Otherwise the lock is free:
///   `DEL` it, or, while the `void` field is set, leave the tombstone
///   `-<f>||<void>` for `retention_ms`; publish nothing, and reply `1`: no
///   other client waits, and the caller wakes its own local waiters. A
///   release never reserves the lock for its own client.
/// * head does not hold our token but `fence` is in the ring: this
///   release already happened (fred replayed it after the reply was lost);
///   reply `2`, so the caller does not report a lock loss that did not
///   happen. (A replay of a release that gave the lock to `next` lands
///   here too; `next`'s own acquire finds the lock its own, see
///   [`ACQUIRE`]'s replay case.)
/// * otherwise reply `0`: the lease ran out before the release. The value, if
///   present, belongs to a newer owner and keeps its head.
///
/// An abandoned acquisition (`fence == ''`), whether it took the lock or not,
/// also voids its token, so that a delayed copy of the acquire (sent on a
/// connection fred gave up on) can never take the lock later: `SET void 1 PX
/// retention_ms`, and raise both the value's `void` field and the `voids`
/// key to the marker's end (an absent key becomes a tombstone with fence 0,
/// so no fast-path `SET NX` can take the name while the marker lives).
pub const RELEASE: &str = concat!(
    include_str!("release_fast.lua"),
    include_str!("fence.lua"),
    include_str!("release.lua")
);

/// Multi-key acquire: every key of a multi-key lock's slot group in one
/// call, for [`LockClient::lock_all`](crate::LockClient::lock_all).
///
/// KEYS: `[lock_1, lock_2, ...]`, in the lock's global order (hash slot,
/// then key; in Redis Cluster all of one slot). ARGV: `[token, lease_ms,
/// publish, retention_ms]`, one token for every key.
///
/// Each key is tried as [`ACQUIRE`] tries it for a caller that will not
/// wait (`client` `''`: no queue entry, no reservation taken), in order,
/// until the first key that is not taken; no key after it is touched. A
/// free key is taken by the fast path inline, with one `TIME` for the
/// call; the void check is made once, on the first key: a call its client
/// gave up on is released with one [`RELEASE_ALL`] of the same keys, which
/// voids the token on all of them at once, so a late copy of the call
/// finds the first key's marker and takes nothing (reply `-1, 0`). The
/// reply is two integers per key tried: `fence, -1` for a key taken (its
/// lease runs from this call), `fence, pttl` for a replayed take (the
/// lease's remaining ms; fred replayed the call after a lost reply), and
/// `code, 0` for the first key not taken, `code` being [`ACQUIRE`]'s
/// integer reply (`-3 - pttl`, `-1` for a voided token).
pub const ACQUIRE_ALL: &str = concat!(
    include_str!("fence.lua"),
    include_str!("one_key.lua"),
    include_str!("acquire.lua"),
    include_str!("acquire_all.lua")
);

/// Multi-key release: every key of a multi-key hold's slot group in one
/// call.
///
/// KEYS: `[lock_1, lock_2, ...]` (in Redis Cluster all of one slot).
/// ARGV: `[token, retention_ms, client, grace_ms, publish, requeue,
/// fence_1, fence_2, ...]`, `requeue` one character per key, `'1'` when
/// this client still has local waiters of that key. Each key is released
/// as [`RELEASE`] releases one hold, with no `next`: freed, or reserved
/// for the client queued first and that client told; a fence `''` is an
/// acquisition abandoned in flight, whose token is voided on that key (the
/// marker and index names are derived from the lock's).
/// The reply is [`RELEASE`]'s code for each key, in order.
pub const RELEASE_ALL: &str = concat!(
    include_str!("fence.lua"),
    include_str!("one_key.lua"),
    include_str!("release_fast.lua"),
    include_str!("release.lua"),
    include_str!("release_all.lua")
);

/// An election's proclamation ([`Leadership::proclaim`](crate::Leadership::proclaim)):
/// the leader's value, written into the lock's record while the lock holds
/// the leader's token, then the election's observers told (`p` on
/// `<lock>:obs`). KEYS `[lock]`; ARGV `[token, value, since_ms, ttl_ms,
/// lease_ms, channel, publish]`. The record's fields `ev` (the value), `et`
/// (the token it belongs to), `es` (since when, ms) and `el` (the leader's
/// lease: the observers read again at least that often): two letters, so
/// a release's replay check, which reads the one-letter ring slots only,
/// never takes a value for a fence. Reply `1` written, `0` not held.
pub const PROCLAIM: &str = include_str!("proclaim.lua");

/// Who leads an election ([`Election::leader`](crate::Election::leader)):
/// KEYS `[lock]`; reply `{value, f, ev, et, es, el}`, the lock's value and its
/// record's counter and leader fields, read at one instant (`nil` where
/// absent).
pub const LEADER: &str = include_str!("leader.lua");

/// Leave the queue: a client whose last local waiter of the lock left.
///
/// KEYS: `[lock]`; ARGV: `[client, channel, publish, free]` (`channel` and
/// `publish` as for [`ACQUIRE`]; optional). Remove `client` from the value's
/// queue (`SET ... KEEPTTL`) and reply `1`; reply `0` when it was neither
/// queued nor freed a reservation. With `channel` given, a client that was
/// queued first passes on what it would have acted on, since protocol 3
/// tells only the clients it names: it tells the client queued first after
/// it `r:X` behind a live reservation for another client X (it becomes the
/// stand-by and probes when the grace ends), `r:` when the lock is free (a
/// tombstone, or a lapsed reservation), `t:<PTTL>` when it is held (the
/// holder's lease).
///
/// A live reservation for `client` itself: with `free` `'1'` (the client
/// had no local waiter when it sent this, so none of its tries can run
/// after it on its connection) it is nobody's: it lapses now (the head
/// becomes the tombstone `-<f>`), and the client queued first is told `r:`
/// (try now), instead of everyone waiting out the grace. Without `free`
/// it is left to lapse: a local waiter that came meanwhile may have made
/// it (a delayed `LEAVE` must not free it), and the
/// release that made it told the stand-by, which probes when the grace
/// ends. [`SEM_LEAVE`] follows the same rule.
pub const LEAVE: &str = include_str!("leave.lua");

/// Whether a lock is taken, for [`LockClient::is_locked`](crate::LockClient::is_locked).
///
/// KEYS: `[lock]`. Reply `1` when the lock is held, reserved for a client
/// (a hand-over in progress), or holds a value relaylock did not write;
/// `0` when it is absent, a tombstone, or a lapsed reservation.
pub const PEEK: &str = include_str!("peek.lua");

/// Renew: extend the leases of one or many locks in one call.
///
/// KEYS: `[lock_1, lock_2, ...]`;
/// ARGV: `[mode, retention_ms, token_1, lease_ms_1, token_2, lease_ms_2, ...]`.
///
/// For each lock `i`: if it holds token `i` (the value is the token alone,
/// or its head is the token with or without its fence), set its remaining
/// lease to `lease_ms_i`, and its record's TTL (`p:4:{k}:f`) to
/// `lease_ms_i + retention_ms`, so the fence counter outlives the hold.
/// `mode`:
/// * `'0'`, exact (`extend`);
/// * `'1'`, grow-only: only if that lengthens it, so a watchdog renewal
///   racing an `extend` to a longer lease cannot undo it;
/// * `'2'`, the write a `min_replicas` check waits for: token `i` is
///   `<token>:<fence>` and must be the whole head (an acquisition that fred
///   replayed on another server has the same token with another fence
///   there); the lease becomes at least `lease_ms_i` and never shorter (a
///   delayed copy of the call cannot undo a later `extend`), and the call
///   always writes (`PEXPIRE`), so `WAIT` has a write to wait for.
///
/// Reply one integer per lock, in order: `1` renewed, `0` the lock is gone
/// (absent, or a tombstone), `-1` it holds another token (or a hand-over
/// reservation). Only `PEXPIRE` is used, so a renewal can never re-create a
/// released lock or a record, and a lock holding another token is never touched.
/// Repeating a call is harmless, so a replay after a lost reply is safe.
///
/// The watchdog sends every due lock of a client in one call (see
/// [`RENEW_BATCH`]); [`LockGuard::extend`](crate::LockGuard::extend) sends
/// one. In Redis Cluster all keys of one call must share a slot.
pub const RENEW: &str = include_str!("renew.lua");

/// Most locks one [`RENEW`] call carries. A round with more due locks sends
/// several calls, one after the other, so other clients' commands run in
/// between: one call renewing 1,000 locks takes about 3.6 ms of Redis time
/// (measured by `a_thousand_watched_locks_cost_one_round_trip_per_period` in
/// `tests/lease.rs`, which prints it).
pub const RENEW_BATCH: usize = 1000;

// `sem_prelude.lua`, the part the semaphore scripts that change state
// ([`SEM_ACQUIRE`], [`SEM_RELEASE`], [`SEM_LEAVE`]) share, joined by
// `concat!` to each script's own parts: parse the value, `TIME`, the cut of
// expired holds and lapsed reservations, `save`, the queue walk and the
// messages. KEYS: `[meta, holds, facts, void, voids]`.

/// Semaphore acquire, for [`Semaphore`](crate::Semaphore) and
/// [`RwLock`](crate::RwLock) (a read-write lock is a semaphore, see
/// [`RW_WRITE`]).
///
/// KEYS: `[meta, holds, facts, void, voids, since]`: the semaphore's value
/// `p:4:{k}:sem` = `used|fence|queue|ring|void`, its expiry index
/// `p:4:{k}:sem:h` (sorted set, member → expiry in server ms), its facts
/// `p:4:{k}:sem:t` (hash: `<token>` → `<n>:<fence>`, `~<client>` → `<m>` for
/// a reservation of m permits), this token's void marker and the
/// semaphore's void index (as for [`ACQUIRE`]), and `p:4:{k}:sem:q` (see
/// [`QUEUE_TIMES`]; optional). ARGV: `[token, n, limit,
/// lease_ms, client, retention_ms, channel, publish, grace_ms, more,
/// want, wchannel, fresh]`; `client` is `''` for a caller that will not wait;
/// `fresh` is `'1'` for a caller that must not take its client's
/// reservation (a reader arriving behind its client's waiters, for whom the
/// reservation was made); then `token, lease_ms` pairs of a batch: other
/// local waiters of the caller's client that an admitted caller takes
/// permits for in the same call (a read-write lock's readers), from what is
/// left of the reservation, or from free permits when the caller needed
/// none; the reply is `{1, fence, left, remaining_ms, f2, remaining2, ...}`:
/// each token's fence (0 for one that did not fit or was voided, its fence
/// again for a replay) and its hold's remaining ms (a hold the token
/// already had started earlier: its holder counts the lease from then);
/// `wchannel` is a read-write lock's writers' channel, where the messages
/// of writer-role clients (ids ending `.w`) go (`''` otherwise); `more` is
/// `'1'` when other local waiters of the caller's client still want
/// permits; `want` is the largest need among the client's waiters (at
/// least `n`, at most `limit`; `n` when absent): the client's queue entry
/// asks for that, raised or lowered in place, so a reservation fits
/// whichever of its waiters is woken. Client ids must not contain
/// `|`, `,` or `:` (relaylock's are 16 hex digits).
///
/// * A numeric argument that is not a non-negative integer, `n` or `limit`
///   below 1, or `n > limit`: an error reply, before anything is written.
/// * a value that is not relaylock's: `{0, -1}`, nothing written.
/// * Expired holds and lapsed reservations are cut first, by score
///   (`ZRANGEBYSCORE`, their permits subtracted from `used`): a crashed
///   holder's permits come back by the server clock alone.
/// * `token` already holds (a replay): `{1, fence, 0, remaining_ms}`,
///   nothing taken twice.
/// * a token whose void marker exists while the `void` field is live:
///   `{0, -2}` (the cut is still saved).
/// * Then the walk (as in [`SEM_RELEASE`]): in queue order, each queued
///   client whose own limit admits its `m` more permits gets a reservation
///   and leaves the queue, until one does not fit. The caller's own client
///   is served in its turn like the others, but not told (the caller is
///   here). So permits that came back by expiry or by a lapsed reservation
///   reach the queue in order without a release, and a queue head whose
///   client is gone costs one grace period, not a stall.
/// * Admitted when the caller's client holds a reservation of `m >= n`
///   permits (it takes `n` of them; the rest stay reserved), or when no
///   client is queued or the caller's client is the first queued, and `used`
///   (less the reservation it uses) `+ n <= limit`, by the CALLER's limit
///   (limits that disagree: each caller's applies to its own admission).
///   Then fence `max(TIME µs, last + 1)`, `ZADD holds (now + lease) token`,
///   `HSET facts token n:fence`, and the client leaves the queue, or, with
///   `more`, moves to its back at `want` (a client with waiters stays
///   queued, so clients take turns) and the walk runs again: if that entry
///   fits now, it is reserved at once. Reply
///   `{1, fence, left, lease_ms}`: `left` permits of the client's reservation are
///   still reserved for it (the caller wakes another local waiter for
///   them).
/// * Otherwise the client (if it waits and is not queued) joins the queue's
///   back as `client:want:limit` (noted in `since`, see [`QUEUE_TIMES`]; a
///   queued client's entry is set to `want` in place), and the reply is `{0, bound}`: ms until the soonest expiry
///   among the holds and the client's own reservation (other clients'
///   reservations are left out: their messages arm grace timers), at least
///   1, `50` when none.
/// * Every name lives at least `lease + retention` (admitted) or
///   `retention` more.
pub const SEM_ACQUIRE: &str = concat!(
    include_str!("sem_acquire_args.lua"),
    include_str!("sem_prelude.lua"),
    include_str!("sem_acquire_body.lua"),
);

/// Semaphore release (see [`SEM_ACQUIRE`] for the names).
///
/// KEYS: as for [`SEM_ACQUIRE`]. ARGV: `[token, fence, channel,
/// retention_ms, ring_chars, client, grace_ms, publish, requeue, n, limit,
/// wchannel, record]` (`wchannel` as for [`SEM_ACQUIRE`]; `record` as for
/// [`RELEASE`]: `'0'` keeps the released fence out of the ring);
/// `fence` is `''` for an acquisition abandoned in flight; `n` and `limit`
/// are what the releasing client's next local waiter needs, used when
/// `requeue` is `'1'`.
///
/// * A numeric argument that is not a non-negative integer: an error reply,
///   before anything is written.
/// * Expired holds are cut first, as in [`SEM_ACQUIRE`].
/// * `fence == ''`: void the token (its marker, and the `void` field and
///   index raised to the marker's end, as [`RELEASE`] does), then release
///   its hold if it has one.
/// * `token` holds with this fence: `ZREM`, `HDEL`, `used -= n`, the fence
///   joins the ring. The releasing client leaves the queue, and joins its
///   back as `client:n:limit` if `requeue` (it still has local waiters).
///   Then the walk: in queue order, each queued client whose own limit
///   admits its `m` more permits gets a reservation `~client` (score
///   `now + grace_ms`, counted in `used`, added to a live one) and leaves
///   the queue; the walk stops at the first client that does not fit (FIFO:
///   nobody passes it). One `r:<client>` message per reservation for
///   another client; the releaser's own client, served in its turn, is not
///   told (its caller wakes a local waiter), but when clients stay queued
///   behind it, one `o:<client>` message lets them re-check should that
///   reservation lapse unused (their own waiters may be sleeping on a
///   hold's whole lease). Reply `{1, reservations, fits}`, where `fits`
///   says whom the caller wakes among its own waiters: `1` its client got
///   a new reservation (wake one, it takes it), `3` a new reservation and
///   nobody else queued (wake up to `n`), `2` nobody is left queued (the
///   permits are free: wake up to `n`), `0` a client ahead of it still
///   waits, or the permits went to its client's live reservation (the
///   waiter woken for that one takes them, and wakes the next). Only a new
///   reservation wakes anyone. (Permits that came back by expiry in the
///   same call are handed out by the same walk, so one release may tell
///   more clients than it freed permits.)
/// * not held, but `fence` is in the ring: a replay, `{2, fits}`.
/// * otherwise `{0, fits}`: the hold had expired (and was cut). The walk
///   runs on these paths too (a cut may have freed permits), hence `fits`.
///
/// The ring keeps [`RING_CHARS`] characters of released fences shared by
/// all holders, so with many concurrent permits a replay is recognised only
/// while fewer than [`RELEASE_RING`] other releases came between.
pub const SEM_RELEASE: &str = concat!(
    include_str!("sem_release_args.lua"),
    include_str!("sem_prelude.lua"),
    include_str!("sem_release_body.lua"),
);

/// Semaphore renew: extend the leases of a batch of holds (see
/// [`SEM_ACQUIRE`] for the names), for the watchdog (every due hold of a
/// client in one call) and `extend` (one).
///
/// KEYS: `[meta, holds, facts]` per hold (in Redis Cluster all in one
/// slot). ARGV: `[mode, retention_ms]`, then `token, lease_ms` per hold.
/// For each hold: if its token's entry exists and has not expired by the
/// server clock, set its expiry to `now + lease_ms` (mode `'0'`, exact;
/// with `'1'`, grow-only: only if that is later), raise each of its names'
/// TTL to at least `lease_ms + retention_ms`, and reply `1`. Otherwise `0`:
/// the hold is gone or expired, its permits are free (a renewal never brings
/// one back). One code per hold, in order. Repeating a call is harmless.
///
/// Mode `'2'` is the write a `min_replicas` check waits for (as
/// [`RENEW`]'s): `token` is `<token>|<n>:<fence>` and the hold's facts entry
/// must equal `<n>:<fence>` (an acquire fred replayed on another server
/// holds the same token with another fence there); the expiry becomes at
/// least `now + lease_ms`, never earlier; and each name's TTL is set to at
/// least `lease_ms + retention_ms` and never shorter, always with a
/// `PEXPIRE`, so the call always writes.
pub const SEM_RENEW: &str = include_str!("sem_renew.lua");

/// Semaphore peek, for [`Semaphore::available`](crate::Semaphore::available)
/// (read-only). KEYS: `[meta, holds, facts]`. Reply `{used, queued}`: the
/// permits held or reserved, not counting holds expired by the server clock
/// (which the next script call cuts), and the number of clients queued;
/// `{-1, 0}` when the value is not relaylock's.
pub const SEM_PEEK: &str = include_str!("sem_peek.lua");

/// Semaphore: leave the queue, for a client whose last local waiter left.
///
/// KEYS: `[meta, holds, facts, voids, voids]` (as for [`SEM_ACQUIRE`]; no
/// token). ARGV: `[client, channel, publish, grace_ms, wchannel, free]`
/// (`wchannel` as for [`SEM_ACQUIRE`]). Cuts expired holds,
/// removes the client's entry from the queue, then walks the queue as a
/// release does: a client that was blocked behind the leaver (it needed
/// more than was free) may fit now, and gets its reservation and message
/// (without the walk, the clients behind a head that gave up would wait
/// for a hold's whole lease). A live reservation for the client
/// is freed first (and so walked on) only with `free` `'1'`, as
/// [`LEAVE`]'s rule says; without it, it is left to its waiter or lapses
/// (the `o:` message its release sent lets the others re-check then). The
/// names' TTLs are kept. Reply `1` when the client was queued or freed a
/// reservation, `0` otherwise or when the value is not relaylock's.
pub const SEM_LEAVE: &str = concat!(
    include_str!("sem_prelude.lua"),
    include_str!("sem_leave_body.lua"),
);

/// Tell every client listening for a name to re-check: sent by a client
/// that found its hold lost while the hold's lease still ran (a release, a
/// renewal), which only an eviction, a `FLUSHALL`, a `DEL` or an
/// operator's unlock does. With the value gone, its queue went with it, so
/// no release would tell the clients that were queued: without this, their
/// waiters sleep until the lease their last try saw ends (docs/design.md,
/// "Falling out of the queue").
///
/// KEYS: `[value]`. ARGV: `[channel, publish, shared, wchannel, fence,
/// token]`. A lock (`shared` `'0'`) whose value is a tombstone or a
/// reservation carrying `fence`, or whose record's field `u` is `token`,
/// was released by an operator (`relaylock unlock`), whose release told the
/// queue: reply `-1`, nobody told. Otherwise its
/// clients each listen on `<channel>:<client>`: the script lists them
/// (`PUBSUB CHANNELS`, or `PUBSUB SHARDCHANNELS` when `publish` is
/// `SPUBLISH`, the channel's glob characters escaped) and publishes `r:`
/// (free: try now) on each, which wakes one waiter of each client. A
/// semaphore's or read-write lock's clients (`shared` `'1'`) share
/// `channel` and `wchannel` (when not `''`): one `r:` on each. Reply: the
/// channels told. The listing walks every channel of the server (65 ms
/// with 200,000 subscribed channels, redis-server 7.0.15, docs/design.md):
/// a client sends it at most once per key and second, four at a time.
/// Commands through `redis.pcall`: an ACL user without `PUBSUB` or the
/// channel tells nobody, and the waiters fall back to their bounded waits. Repeating it is harmless (one more try per
/// client).
pub const WAKE: &str = include_str!("wake.lua");

/// One script: its Lua and its SHA-1, both `'static`. Every call sends
/// the hash as a static `Str`, whose clone and drop touch no reference
/// count: a hash made per client would be a shared buffer whose one
/// counter every call of every thread increments and decrements.
#[derive(Clone, Debug)]
pub(crate) struct Lua {
    lua: &'static str,
    sha1: Str,
}

impl Lua {
    /// `lua` with its SHA-1, hashed into `sha1` on first use.
    fn hashed(lua: &'static str, sha1: &'static OnceLock<String>) -> Lua {
        let sha1 = sha1.get_or_init(|| fred::util::sha1_hash(lua));
        Lua {
            lua,
            sha1: fred::util::static_str(sha1),
        }
    }

    /// The script's SHA-1, as `EVALSHA` takes it.
    pub(crate) fn sha1(&self) -> &Str {
        &self.sha1
    }

    /// `SCRIPT LOAD` it (on every primary, in a cluster).
    pub(crate) async fn load(&self, conn: &Client) -> Result<(), fred::error::Error> {
        conn.script_load_cluster::<(), _>(fred::util::static_str(self.lua))
            .await
    }
}

/// The scripts, hashed once per process.
#[derive(Clone, Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Lua,
    pub(crate) release: Lua,
    pub(crate) renew: Lua,
    pub(crate) peek: Lua,
    pub(crate) leave: Lua,
    pub(crate) sem_acquire: Lua,
    pub(crate) sem_release: Lua,
    pub(crate) sem_renew: Lua,
    pub(crate) sem_peek: Lua,
    pub(crate) sem_leave: Lua,
    pub(crate) wake: Lua,
    pub(crate) acquire_all: Lua,
    pub(crate) release_all: Lua,
    pub(crate) proclaim: Lua,
    pub(crate) leader: Lua,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        // Each script's SHA-1 in a static of its own, hashed once per
        // process, beside the constant it hashes.
        macro_rules! lua {
            ($lua:expr) => {{
                static SHA1: OnceLock<String> = OnceLock::new();
                Lua::hashed($lua, &SHA1)
            }};
        }
        Scripts {
            acquire: lua!(ACQUIRE),
            release: lua!(RELEASE),
            renew: lua!(RENEW),
            peek: lua!(PEEK),
            leave: lua!(LEAVE),
            sem_acquire: lua!(SEM_ACQUIRE),
            sem_release: lua!(SEM_RELEASE),
            sem_renew: lua!(SEM_RENEW),
            sem_peek: lua!(SEM_PEEK),
            sem_leave: lua!(SEM_LEAVE),
            wake: lua!(WAKE),
            acquire_all: lua!(ACQUIRE_ALL),
            release_all: lua!(RELEASE_ALL),
            proclaim: lua!(PROCLAIM),
            leader: lua!(LEADER),
        }
    }
}

/// Call `script` on `conn` with the keys and arguments `make` builds,
/// loading it and calling again if Redis lost it (`NOSCRIPT`: a restart, a
/// failover, `SCRIPT FLUSH`). The arguments are built again for the second
/// call rather than cloned for every call (fred's `evalsha_with_reload`
/// clones them). Unbounded: callers add the command timeout.
pub(crate) async fn evalsha_reloading<R, K, F>(
    conn: &Client,
    script: &Lua,
    make: F,
) -> Result<R, fred::error::Error>
where
    R: FromValue,
    K: Into<Key> + Send,
    F: Fn() -> (Vec<K>, Vec<Value>),
{
    reloading(conn, script, None, |_| {
        let (keys, args) = make();
        conn.evalsha::<R, _, _, _>(script.sha1().clone(), keys, args)
    })
    .await
}

/// [`evalsha_reloading`] with fred's own per-command timeout `limit`
/// (`Options::timeout`), as a custom `EVALSHA` (fred's `WithOptions` has no
/// script interface): fred marks a command whose timeout passed, so it is
/// never written later (a command whose future is merely dropped stays in
/// fred's queue while it reconnects, and runs once the server is back).
/// The reload after `NOSCRIPT` gets what is left of `limit`.
pub(crate) async fn evalsha_within<R, K, F>(
    conn: &Client,
    script: &Lua,
    limit: Duration,
    make: F,
) -> Result<R, fred::error::Error>
where
    R: FromValue,
    K: Into<Key> + Send,
    F: Fn() -> (Vec<K>, Vec<Value>),
{
    use fred::interfaces::ClientLike;
    use fred::types::config::Options;
    use fred::types::{ClusterHash, CustomCommand};
    reloading(conn, script, Some(limit), |left| {
        let (keys, args) = make();
        let keys: Vec<Key> = keys.into_iter().map(Into::into).collect();
        let slot = keys
            .first()
            .map_or(0, |k| fred::util::redis_keyslot(k.as_bytes()));
        let mut all: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
        all.push(Value::String(script.sha1().clone()));
        all.push((keys.len() as i64).into());
        all.extend(keys.into_iter().map(|k| Value::Bytes(k.into_bytes())));
        all.extend(args);
        let options = Options {
            timeout: left,
            ..Default::default()
        };
        let node = conn.with_options(&options);
        async move {
            node.custom::<R, Value>(
                CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false),
                all,
            )
            .await
        }
    })
    .await
}

/// What [`evalsha_reloading`] and [`evalsha_within`] share: `call(left)`
/// makes one call of `script`, given the time `left` of `limit` (`None`:
/// unbounded). After `NOSCRIPT` (a restart, a failover, `SCRIPT FLUSH`),
/// load the script and call again. With a `limit`, the load and the second
/// call get only what is left of it, and a load that uses it all up is a
/// timeout (the second call is not sent).
async fn reloading<R, Fut>(
    conn: &Client,
    script: &Lua,
    limit: Option<Duration>,
    call: impl Fn(Option<Duration>) -> Fut,
) -> Result<R, fred::error::Error>
where
    Fut: Future<Output = Result<R, fred::error::Error>>,
{
    // The clock is read only for a bounded call.
    let since = limit.map(|limit| (limit, Instant::now()));
    let left = || since.map(|(limit, started)| limit.saturating_sub(started.elapsed()));
    match call(limit).await {
        Err(e) if e.details().starts_with("NOSCRIPT") => {
            match left() {
                None => Box::pin(script.load(conn)).await?,
                Some(left) => match tokio::time::timeout(left, Box::pin(script.load(conn))).await {
                    Ok(loaded) => loaded?,
                    Err(_) => return Err(crate::error::timed_out()),
                },
            }
            let left = left();
            if left.is_some_and(|left| left.is_zero()) {
                return Err(crate::error::timed_out());
            }
            Box::pin(call(left)).await
        }
        other => other,
    }
}

/// The protocol version in every Redis name (see docs/design.md,
/// "Upgrading from protocol 1"). One digit.
pub const PROTOCOL: u32 = 4;

/// The permits a write takes, and the limit every read-write lock call
/// gives: a read-write lock is a semaphore of this many permits where a
/// read takes 1 and a write takes all of them, so a write is admitted only
/// when nothing is held, and a read only when no write is. The queue's FIFO
/// gives writer preference: a queued writer stops the readers behind it.
pub const RW_WRITE: u32 = 1_000_000_000;

/// Slots of a lock's release ring (see [`RELEASE`]): the record `<lock>:f`
/// keeps released fence `x` in the one-letter field of `x mod 32` (`A` to
/// `` ` ``: one `HSET`, nothing read). Every fence is the one before it plus
/// one, mod 32 (see `fence.lua`), so the slots are written in turn, and
/// a release replayed after fewer than 32 others is recognised.
pub const LOCK_RING_SLOTS: usize = 32;

/// Characters of released fences a semaphore's ring keeps: [`RELEASE_RING`]
/// tokens of 16 digits plus a separator.
pub const RING_CHARS: usize = RELEASE_RING * 17;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lean_calls_stand_for_the_default_settings() {
        // RELEASE's four-argument call and ACQUIRE's three-argument call
        // write these defaults into the lock's value and its TTL.
        let lean = format!(
            "retention, client, grace, publish, requeue = '{SIDE_RETENTION_MS}', \
             ARGV[3], {HANDOFF_GRACE_MS}, 'PUBLISH', ARGV[4]"
        );
        assert!(RELEASE.contains(&lean), "{lean}");
        assert!(ACQUIRE.contains(&format!("tonumber(ARGV[6] or '') or {SIDE_RETENTION_MS}\n")));
        assert!(ACQUIRE.contains("ARGV[5] or 'PUBLISH'"));
        assert!(ACQUIRE.contains("ARGV[4] or KEYS[1] .. ':ch'"));
    }

    #[test]
    fn scripts_have_distinct_hashes() {
        let s = Scripts::new();
        let all = [
            &s.acquire,
            &s.release,
            &s.renew,
            &s.peek,
            &s.leave,
            &s.sem_acquire,
            &s.sem_release,
            &s.sem_renew,
            &s.sem_peek,
            &s.sem_leave,
            &s.wake,
            &s.acquire_all,
            &s.release_all,
            &s.proclaim,
            &s.leader,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.sha1(), b.sha1());
            }
        }
    }

    /// Each script and its files, in `concat!`'s order: what the module
    /// docs say to `cat` for `redis-cli --eval`.
    const FILES: [(&str, &[&str]); 15] = [
        (ACQUIRE, &["fence.lua", "acquire.lua"]),
        (RELEASE, &["release_fast.lua", "fence.lua", "release.lua"]),
        (LEAVE, &["leave.lua"]),
        (PEEK, &["peek.lua"]),
        (RENEW, &["renew.lua"]),
        (
            SEM_ACQUIRE,
            &[
                "sem_acquire_args.lua",
                "sem_prelude.lua",
                "sem_acquire_body.lua",
            ],
        ),
        (
            SEM_RELEASE,
            &[
                "sem_release_args.lua",
                "sem_prelude.lua",
                "sem_release_body.lua",
            ],
        ),
        (SEM_RENEW, &["sem_renew.lua"]),
        (SEM_PEEK, &["sem_peek.lua"]),
        (SEM_LEAVE, &["sem_prelude.lua", "sem_leave_body.lua"]),
        (WAKE, &["wake.lua"]),
        (PROCLAIM, &["proclaim.lua"]),
        (LEADER, &["leader.lua"]),
        (
            ACQUIRE_ALL,
            &["fence.lua", "one_key.lua", "acquire.lua", "acquire_all.lua"],
        ),
        (
            RELEASE_ALL,
            &[
                "fence.lua",
                "one_key.lua",
                "release_fast.lua",
                "release.lua",
                "release_all.lua",
            ],
        ),
    ];

    #[test]
    fn every_script_is_its_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/scripts");
        let read = |file: &str| std::fs::read_to_string(dir.join(file)).expect(file);
        for (lua, files) in FILES {
            let cat: String = files.iter().map(|f| read(f)).collect();
            assert!(lua == cat, "not the `cat` of {files:?}");
        }
        // Every .lua file of the folder is part of a script.
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".lua") {
                assert!(
                    FILES
                        .iter()
                        .any(|(_, files)| files.contains(&name.as_str())),
                    "{name} is part of no script"
                );
            }
        }
    }
}
