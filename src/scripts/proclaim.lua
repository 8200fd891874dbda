-- An election's leader writes its value (and when it began leading) into
-- the lock's record, only while the lock holds its token: KEYS `[lock]`,
-- ARGV `[token, value, since_ms, ttl_ms, lease_ms, channel, publish]`. The
-- fields are `ev`, `et` (the token the value belongs to), `es` and `el`
-- (the leader's lease, the observers' period): names of two letters, never
-- a ring slot's. A record this write made anew (the old one evicted) gets
-- `ttl_ms`. Then the observers are told on `channel` (`publish` is PUBLISH,
-- or SPUBLISH in a cluster). Reply 1 written, 0 the lock does not hold the
-- token.
local t = ARGV[1]
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local c = string.byte(v, #t + 1)
if string.sub(v, 1, #t) ~= t or not (c == nil or c == 58 or c == 124) then return 0 end
local record = KEYS[1] .. ':f'
redis.call('HSET', record, 'ev', ARGV[2], 'et', t, 'es', ARGV[3], 'el', ARGV[5])
if redis.call('PTTL', record) == -1 then redis.call('PEXPIRE', record, ARGV[4]) end
redis.pcall(ARGV[7], ARGV[6], 'p')
return 1
