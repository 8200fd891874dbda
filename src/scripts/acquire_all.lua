end
-- A multi-key acquisition, every key of KEYS in order (all in one slot in
-- a cluster), never waiting: ARGV `[token, lease_ms, publish,
-- retention_ms]`. Each key is taken as ACQUIRE takes it for a caller that
-- will not wait (no queue entry), until the first one that is not free.
-- The reply is two integers per key tried: `fence, left` for a key taken
-- (`left` is the lease's remaining ms for a replayed take, `-1` for a full
-- lease from this call), then `code, 0` for the first key not taken, as
-- ACQUIRE's integer reply (`-3 - pttl`, or `-1` for a voided token); no
-- key after it is touched.
-- A free key (the common case) is taken here, as ACQUIRE's fast path
-- takes it, with one TIME for the whole call and the void check above;
-- any other key goes through ACQUIRE itself (`one`).
local t, lease = ARGV[1], ARGV[2]
-- A late copy of a call its client gave up on (sent on a connection fred
-- replaced): that client released the call's keys with one RELEASE_ALL of
-- the same keys, which voided the token on every one of them at once, so
-- the first key's marker says it for all (one check per call, not per key).
if redis.call('EXISTS', KEYS[1] .. ':void:' .. t) == 1 then return {-1, 0} end
local ttl = tonumber(lease) + tonumber(ARGV[4])
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000000 + tonumber(now[2])
local out, n = {}, 0
local args = {t, lease, '', '', ARGV[3], ARGV[4]}
for i = 1, #KEYS do
  local k, r = KEYS[i], nil
  if redis.call('SET', k, t, 'NX', 'PX', lease) then
    r = next_fence(k, 0, ttl, nil, now)
  else
    args[4] = k .. ':ch'
    r = one({k}, args)
  end
  if type(r) == 'table' then
    out[n + 1], out[n + 2] = r[2], r[4]
  elseif r > 0 then
    out[n + 1], out[n + 2] = r, -1
  else
    out[n + 1], out[n + 2] = r, 0
    break
  end
  n = n + 2
end
return out
