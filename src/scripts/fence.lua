
-- The next fencing token of the lock `key`: the larger of the server's
-- TIME in microseconds (`now`, when the caller read it already) and its record's counter `f` plus one, raised above
-- `last`, then to the next number with the remainder mod 32 of the counter
-- plus one, and written back into the counter. The counter keeps the tokens
-- rising whatever the clock does while the record lives; the clock carries
-- them past a record that is gone, or that a failover left behind; the
-- remainder makes every fence take the next of the ring's 32 slots (see
-- the release). The record then lives `ttl` ms (the lease plus the
-- retention): longer than the hold. With `released`, a release's fence,
-- that fence goes into the ring in the same write.
local function next_fence(key, last, ttl, released, now)
  local record = key .. ':f'
  local c = (tonumber(redis.call('HGET', record, 'f')) or 0) + 1
  local f = now
  if not f then
    local t = redis.call('TIME')
    f = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if c > f then f = c end
  if last >= f then f = last + 1 end
  f = f + (c - f) % 32
  local fs = string.format('%d', f)
  if released then
    redis.call('HSET', record, 'f', fs, string.char(65 + tonumber(released) % 32), released)
  else
    redis.call('HSET', record, 'f', fs)
  end
  redis.call('PEXPIRE', record, ttl)
  return f
end
