local v = redis.call('GET', KEYS[1])
local t = ARGV[1]
if v ~= t and string.sub(v or '', 1, #t + 1) ~= t .. '|' then return 0 end
return next_fence(0, tonumber(ARGV[2]))
