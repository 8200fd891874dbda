//! Every Lua script relaylock runs, in one place, each with its contract.
//!
//! The sources are public so the protocol can be audited, and reused by
//! clients in other languages that must interoperate with relaylock locks.
//!
//! All scripts touch only the names of ONE lock, which share the hash tag
//! `{<key>}` (see the table below), so they stay valid in Redis Cluster.
//!
//! Names of one lock (prefix `p`, user key `k`):
//!
//! | name            | type   | lifetime                               | purpose |
//! |-----------------|--------|----------------------------------------|---------|
//! | `p:{k}`         | string | the lease                              | the lock: `"<token>:<fence>"` |
//! | `p:{k}:fence`   | hash   | lease + [`SIDE_RETENTION_MS`] after the last acquire, [`SIDE_RETENTION_MS`] after a release | `f`: last fencing token issued; `r`: the newest released fences; `rsv`: the client the last release reserved the lock for |
//! | `p:{k}:q`       | hash   | at least [`SIDE_RETENTION_MS`] past the holder's lease at the last registration, and past the last hand-over; never shortened | clients waiting for the lock: client id -> when it started waiting (µs) |
//! | `p:{k}:ch`      | channel| -                                      | `r:<client>` hand-over (empty client: free for all), `t:<lease ms>` reservation taken |
//!
//! # Hand-over between clients
//!
//! Every client (one [`LockClient`](crate::LockClient), usually one process)
//! has an id. A client whose waiter fails to acquire registers in the queue
//! hash with the time it started waiting (`HSETNX`: the oldest stays). A
//! release picks the client that waited longest, other than the releaser, and
//! turns the lock into a reservation `~<client>` for [`HANDOFF_GRACE_MS`],
//! publishing `r:<client>`. Only that client retries; the others sleep on. So
//! a release costs one retry in total, and clients take turns in the order
//! they started waiting instead of the one Redis delivers messages to first
//! winning every time. The releaser queues again at the back when it still has
//! local waiters. A reservation nobody takes expires, and the next acquirer
//! drops the no-show from the queue. With nobody else queued, a release
//! deletes the key and publishes `r:` (free for all local waiters).
//!
//! Messages are sent with `redis.pcall`: a client whose ACL forbids the
//! channel still acquires and releases, and the waiters of other clients fall
//! back to their bounded waits (the holder's lease, the grace period).
//!
//! Lua numbers are doubles: a fencing token (microseconds since the epoch, about
//! 1.8e15) is exact, but `tostring` would print it as `1.79e+15`. Scripts
//! therefore format tokens with `string.format('%d', n)` and return them as
//! numbers, which Redis converts to integer replies exactly.

use fred::types::scripts::Script;

/// How long the side hash outlives the lock that last touched it, in ms, by
/// default (see [`LockClientBuilder::side_retention`](crate::LockClientBuilder::side_retention)).
///
/// It bounds the memory relaylock leaves behind per lock name, and it is the
/// window in which (a) a replayed release is still recognised as ours and (b) a
/// server clock stepping backwards cannot make fencing tokens go backwards.
pub const SIDE_RETENTION_MS: u64 = 60_000;

/// How long a released lock stays reserved for the client chosen to take it
/// next, in ms. Bounds the idle time when that client no longer has waiters.
pub const HANDOFF_GRACE_MS: u64 = 50;

/// How many released fencing tokens the side hash remembers (see [`RELEASE`]).
pub const RELEASE_RING: usize = 32;

/// Acquire.
///
/// KEYS: `[lock, side, void, queue]`;
/// ARGV: `[token, lease_ms, side_ttl_ms, client, channel, queued, publish, retention_ms]`.
/// `publish` is `PUBLISH`, or `SPUBLISH` in Redis Cluster (sharded pub/sub:
/// the message stays within the lock's shard).
/// `client` is `''` for a caller that will not wait (try_lock, polling): it
/// neither queues nor takes a reservation. `queued` is `'1'` when the client
/// believes it is in the queue (so an acquisition takes it out).
///
/// * lock holds OUR token (a replay of this very call after a lost reply, as
///   fred does after a reconnect): reply `{1, fence}` with the fence stored in
///   the value, so acquiring is idempotent.
/// * lock holds another token, or a reservation for another client: register
///   `client` in the queue (`HSETNX`, so the earliest wait start stays; the
///   queue then lives at least `retention_ms` past the holder's lease, and
///   its expiry is never shortened) and reply `{0, pttl}` (`-1` if the key
///   has no expiry: somebody outside relaylock wrote it).
/// * lock absent and `void` (`p:{k}:void:<token>`) present: this token's
///   caller gave up and already released it (see [`RELEASE`]); a delayed copy
///   of the call must not take the lock. Reply `{0, -2}`.
/// * lock absent, or reserved for `client`: the fencing token is the server's
///   `TIME` in microseconds, raised to `last + 1` if the side hash remembers
///   an equal or later one (two acquisitions in one microsecond, or a clock
///   step back within the side hash's lifetime). `SET lock "<token>:<fence>"
///   PX lease`, remember the fence, leave the queue if queued (a reservation
///   left unused by another client, remembered as the side hash's `rsv`,
///   drops that client from the queue), publish `t:<lease>` when a
///   reservation was taken, and reply `{1, fence}`.
pub const ACQUIRE: &str = r#"
local v = redis.call('GET', KEYS[1])
local reserved = false
if v then
  local mine = ARGV[1] .. ':'
  if string.sub(v, 1, #mine) == mine then
    return {1, tonumber(string.sub(v, #mine + 1))}
  end
  if ARGV[4] ~= '' and v == '~' .. ARGV[4] then
    reserved = true
  else
    local pttl = redis.call('PTTL', KEYS[1])
    if ARGV[4] ~= '' then
      local t = redis.call('TIME')
      redis.call('HSETNX', KEYS[4], ARGV[4], t[1] .. string.format('%06d', t[2]))
      local keep = math.max(pttl, 0) + tonumber(ARGV[8])
      if redis.call('PTTL', KEYS[4]) < keep then redis.call('PEXPIRE', KEYS[4], keep) end
    end
    return {0, pttl}
  end
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, -2}
end
local t = redis.call('TIME')
local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
local side = redis.call('HMGET', KEYS[2], 'f', 'rsv')
local last = tonumber(side[1])
if last and last >= fence then fence = last + 1 end
local fs = string.format('%d', fence)
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fs, 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'f', fs)
if side[2] then
  if side[2] ~= ARGV[4] then redis.call('HDEL', KEYS[4], side[2]) end
  redis.call('HDEL', KEYS[2], 'rsv')
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
if reserved or ARGV[6] == '1' then redis.call('HDEL', KEYS[4], ARGV[4]) end
if reserved then redis.pcall(ARGV[7], ARGV[5], 't:' .. ARGV[2]) end
return {1, fence}
"#;

/// Release.
///
/// KEYS: `[lock, side, void, queue]`;
/// ARGV: `[token, fence, channel, side_ttl_ms, ring_chars, client, grace_ms, publish]`
/// (`publish` as for [`ACQUIRE`]).
/// `fence` is `''` when the caller does not know it: an acquisition abandoned
/// while in flight (future dropped, error, timeout). `client` is the
/// releasing client's id when it still has local waiters (it queues again, at
/// the back), else `''`.
///
/// * lock holds `"<token>:<f>"`: push `f` onto the side hash's ring `r` of
///   recently released fences (newest first, cut to `ring_chars`
///   characters). Then hand over: if another client is queued, reserve the
///   lock for the one waiting longest (`SET lock ~<client> PX grace`,
///   remember it as the side hash's `rsv`, `PUBLISH channel r:<client>`);
///   otherwise `DEL` the lock and `PUBLISH channel r:`. Reply `1`.
/// * lock does not hold our token but `fence` is in the ring: this release
///   already happened (fred replayed it after the reply was lost); reply `2`,
///   so the caller does not report a lock loss that did not happen.
/// * an abandoned acquisition (`fence == ''`) that did not take the lock:
///   `SET void 1 PX side_ttl_ms`, so that a delayed copy of the acquire (sent
///   on a connection fred gave up on) can never take it later; reply `0`.
/// * otherwise the lease ran out before the release: reply `0`. The key, if
///   present, belongs to a newer owner and is left untouched.
pub const RELEASE: &str = r#"
local v = redis.call('GET', KEYS[1])
local mine = ARGV[1] .. ':'
if v and string.sub(v, 1, #mine) == mine then
  local fence = string.sub(v, #mine + 1)
  local ring = redis.call('HGET', KEYS[2], 'r')
  if ring then ring = fence .. ' ' .. ring else ring = fence end
  local cap = tonumber(ARGV[5])
  if #ring > cap then ring = string.match(string.sub(ring, 1, cap + 1), '^(.*) ') or fence end
  redis.call('HSET', KEYS[2], 'r', ring)
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  local q = redis.call('HGETALL', KEYS[4])
  local best, best_t = nil, nil
  for i = 1, #q, 2 do
    if q[i] ~= ARGV[6] then
      local t = tonumber(q[i + 1])
      if t and (best_t == nil or t < best_t) then best, best_t = q[i], t end
    end
  end
  if best then
    if ARGV[6] ~= '' then
      local t = redis.call('TIME')
      redis.call('HSET', KEYS[4], ARGV[6], t[1] .. string.format('%06d', t[2]))
    end
    redis.call('SET', KEYS[1], '~' .. best, 'PX', ARGV[7])
    redis.call('HSET', KEYS[2], 'rsv', best)
    if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[4], ARGV[4]) end
    redis.pcall(ARGV[8], ARGV[3], 'r:' .. best)
  else
    redis.call('DEL', KEYS[1])
    redis.pcall(ARGV[8], ARGV[3], 'r:')
  end
  return 1
end
if ARGV[2] == '' then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[4])
  return 0
end
local ring = redis.call('HGET', KEYS[2], 'r')
if ring and string.find(' ' .. ring .. ' ', ' ' .. ARGV[2] .. ' ', 1, true) then
  return 2
end
return 0
"#;

/// Renew: extend the leases of one or many locks in one call.
///
/// KEYS: `[lock_1, side_1, lock_2, side_2, ...]`;
/// ARGV: `[side_retention_ms, grow_only, token_1, lease_ms_1, token_2, lease_ms_2, ...]`.
///
/// For each lock `i`: if it holds token `i`, set its remaining lease to
/// `lease_ms_i` (with `grow_only == '1'`, only if that lengthens it, so a
/// watchdog renewal racing an `extend` to a longer lease cannot undo it) and
/// make sure its side hash lives at least `lease_ms_i + side_retention_ms`
/// more. Reply one integer per lock, in
/// order: `1` renewed, `0` the key is gone, `-1` the key holds another
/// token (or a hand-over reservation). Only `PEXPIRE` is used, so a renewal
/// can never re-create a released key, and a key holding another token is
/// never touched. Repeating a call is harmless, so a replay after a lost reply
/// is safe.
///
/// The watchdog sends every due lock of a client in one call (see
/// [`RENEW_BATCH`]); [`LockGuard::extend`](crate::LockGuard::extend) sends
/// one. In Redis Cluster all keys of one call must share a slot.
pub const RENEW: &str = r#"
local keep = tonumber(ARGV[1])
local grow_only = ARGV[2] == '1'
local out = {}
for i = 1, #KEYS / 2 do
  local lock, side = KEYS[2 * i - 1], KEYS[2 * i]
  local mine = ARGV[2 * i + 1] .. ':'
  local lease = tonumber(ARGV[2 * i + 2])
  local v = redis.call('GET', lock)
  if v and string.sub(v, 1, #mine) == mine then
    if not grow_only or redis.call('PTTL', lock) < lease then
      redis.call('PEXPIRE', lock, lease)
    end
    if redis.call('PTTL', side) < lease + keep then
      redis.call('PEXPIRE', side, lease + keep)
    end
    out[i] = 1
  elseif v then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
"#;

/// Most locks one [`RENEW`] call carries. A round with more due locks sends
/// several calls, one after the other, so other clients' commands run in
/// between: one call renewing 1,000 locks takes about 3.6 ms of Redis time
/// (measured by `a_thousand_watched_locks_cost_one_round_trip_per_period` in
/// `tests/watchdog.rs`, which prints it).
pub const RENEW_BATCH: usize = 1000;

/// The three scripts, hashed once per client.
#[derive(Clone, Debug)]
pub(crate) struct Scripts {
    pub(crate) acquire: Script,
    pub(crate) release: Script,
    pub(crate) renew: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: Script::from_lua(ACQUIRE),
            release: Script::from_lua(RELEASE),
            renew: Script::from_lua(RENEW),
        }
    }
}

/// The Redis names of one lock. Every name starts with `<prefix>:{<key>}` so
/// they all hash to the same cluster slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Names {
    /// `<prefix>:{<key>}`: the lock itself.
    pub(crate) lock: String,
    /// `<prefix>:{<key>}:fence`: the fence hash (the last fencing token,
    /// the ring of released ones, the current reservation).
    pub(crate) fence: String,
    /// `<prefix>:{<key>}:ch`: the release channel.
    pub(crate) channel: String,
    /// `<prefix>:{<key>}:q`: the clients waiting for the lock.
    pub(crate) queue: String,
}

impl Names {
    /// The queue name of the lock whose release channel is `channel` (for
    /// the rare path that has only the channel at hand).
    pub(crate) fn queue_of_channel(channel: &str) -> String {
        let lock = channel.strip_suffix(":ch").unwrap_or(channel);
        format!("{lock}:q")
    }

    /// `<prefix>:{<key>}:void:<token>`: marks an abandoned acquisition.
    pub(crate) fn void(&self, token: &str) -> String {
        format!("{}:void:{token}", self.lock)
    }

    pub(crate) fn new(prefix: &str, key: &str) -> Self {
        let lock = format!("{prefix}:{{{key}}}");
        Names {
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:ch"),
            queue: format!("{lock}:q"),
            lock,
        }
    }
}

/// Characters of released fences the ring keeps: [`RELEASE_RING`] tokens of 16
/// digits plus a separator.
pub const RING_CHARS: usize = RELEASE_RING * 17;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_share_one_hash_tag() {
        let n = Names::new("relaylock", "orders:42");
        assert_eq!(n.lock, "relaylock:{orders:42}");
        assert_eq!(n.fence, "relaylock:{orders:42}:fence");
        assert_eq!(n.channel, "relaylock:{orders:42}:ch");
        assert_eq!(n.queue, "relaylock:{orders:42}:q");
        assert_eq!(Names::queue_of_channel(&n.channel), n.queue);
        let odd = Names::new("p", "x}:ch");
        assert_eq!(Names::queue_of_channel(&odd.channel), odd.queue);
    }

    #[test]
    fn lock_names_never_collide_with_side_names() {
        // A lock name always ends with '}', a side name with "fence".
        let a = Names::new("p", "x}:fence");
        let b = Names::new("p", "x");
        assert_ne!(a.lock, b.fence);
        assert!(a.lock.ends_with('}'));
    }

    #[test]
    fn scripts_have_distinct_hashes() {
        let s = Scripts::new();
        assert_ne!(s.acquire.sha1(), s.release.sha1());
        assert_ne!(s.release.sha1(), s.renew.sha1());
    }
}
