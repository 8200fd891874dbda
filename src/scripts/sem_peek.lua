
local v = redis.call('GET', KEYS[1])
if not v then return {0, 0} end
local f = {}
for x in string.gmatch(v .. '|', '([^|]*)|') do f[#f + 1] = x end
if #f ~= 5 or not string.find(f[1], '^%d+$') then return {-1, 0} end
local used = tonumber(f[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 1, #gone, 1000 do
  local facts = redis.call('HMGET', KEYS[3], unpack(gone, i, math.min(i + 999, #gone)))
  for k = 1, #facts do
    if facts[k] then used = used - (tonumber(string.match(facts[k], '^(%d+)')) or 0) end
  end
end
if used < 0 then used = 0 end
local queued = 0
for _ in string.gmatch(f[3], '[^,]+') do queued = queued + 1 end
return {used, queued}
