
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if not string.find(v, '|', 1, true) then return 1 end
local kind = string.sub(v, 1, 1)
if kind == '-' then return 0 end
if kind == '~' then
  local keep = tonumber(string.match(v, '^~[^:|]*:%d+:(%d+)|'))
  if keep and redis.call('PTTL', KEYS[1]) > keep then return 1 end
  return 0
end
return 1
