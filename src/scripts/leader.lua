-- Who leads an election: KEYS `[lock]`. Reply `{value, f, ev, et, es,
-- el}`: the lock's value (false when absent) and its record's fence counter
-- and leader fields (false where absent), read at one instant.
local r = redis.call('HMGET', KEYS[1] .. ':f', 'f', 'ev', 'et', 'es', 'el')
return {redis.call('GET', KEYS[1]), r[1], r[2], r[3], r[4], r[5]}
