
local v = redis.call('GET', KEYS[1])
local used, last, queue, ring, void = 0, 0, '', '', ''
local foreign = false
if v then
  local f = {}
  for x in string.gmatch(v .. '|', '([^|]*)|') do f[#f + 1] = x end
  if #f ~= 5 or not string.find(f[1], '^%d+$') or not string.find(f[2], '^%d+$') or not string.find(f[5], '^%d*$') then
    foreign = true
  else
    used, last, queue, ring, void = tonumber(f[1]), tonumber(f[2]), f[3], f[4], f[5]
  end
else
  void = redis.call('GET', KEYS[5]) or ''
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)
local function cut()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
  for i = 1, #gone, 1000 do
    local j = math.min(i + 999, #gone)
    local facts = redis.call('HMGET', KEYS[3], unpack(gone, i, j))
    for k = 1, #facts do
      if facts[k] then used = used - (tonumber(string.match(facts[k], '^(%d+)')) or 0) end
    end
    redis.call('HDEL', KEYS[3], unpack(gone, i, j))
  end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now) end
  if used < 0 then used = 0 end
end
local function store()
  redis.call('SET', KEYS[1], string.format('%d', used) .. '|' .. string.format('%d', last) .. '|' .. queue .. '|' .. ring .. '|' .. void, 'KEEPTTL')
end
local function save(keep)
  store()
  for i = 1, 3 do
    local p = redis.call('PTTL', KEYS[i])
    if p == -1 or (p >= 0 and p < keep) then redis.call('PEXPIRE', KEYS[i], keep) end
  end
end
local function queued(c)
  return c ~= '' and string.find(',' .. queue, ',' .. c .. ':', 1, true) ~= nil
end
local function dequeue(c)
  local rest = {}
  for e in string.gmatch(queue, '[^,]+') do
    if string.sub(e, 1, #c + 1) ~= c .. ':' then rest[#rest + 1] = e end
  end
  queue = table.concat(rest, ',')
end
local told = {}
local own_reserved, own_added = false, false
local function walk(own, grace)
  local rest, blocked = {}, false
  for e in string.gmatch(queue, '[^,]+') do
    local c, m, l = string.match(e, '^([^:]+):(%d+):(%d+)$')
    if not c then
    elseif blocked then
      rest[#rest + 1] = e
    elseif used + tonumber(m) <= tonumber(l) then
      local had = tonumber(redis.call('HGET', KEYS[3], '~' .. c) or '0') or 0
      redis.call('ZADD', KEYS[2], now + grace, '~' .. c)
      redis.call('HSET', KEYS[3], '~' .. c, string.format('%d', had + tonumber(m)))
      used = used + tonumber(m)
      -- Only a new reservation wakes anyone: added to a live one, it is
      -- taken by the waiter woken for that one, which wakes the next while
      -- some are left (the acquire's `left`).
      if had > 0 then
        if c == own then own_added = true end
      elseif c == own then own_reserved = true else told[#told + 1] = c end
    else
      blocked = true
      rest[#rest + 1] = e
    end
  end
  queue = table.concat(rest, ',')
end
local function fits()
  if own_reserved then
    if queue == '' then return 3 end
    return 1
  end
  if queue == '' and not own_added then return 2 end
  return 0
end
-- A read-write lock (`wchannel` given) tells on both of its channels: the
-- role reserved for wakes, and the other role's waiters arm a grace timer,
-- should the reservation lapse unused (else a writer queued behind a
-- readers' reservation that lapsed would sleep on a lease).
local function tell(publish, channel, own, wchannel)
  for _, c in ipairs(told) do
    redis.pcall(publish, channel, 'r:' .. c)
    if wchannel and wchannel ~= '' then redis.pcall(publish, wchannel, 'r:' .. c) end
  end
  if own and own_reserved and queue ~= '' then
    redis.pcall(publish, channel, 'o:' .. own)
    if wchannel and wchannel ~= '' then redis.pcall(publish, wchannel, 'o:' .. own) end
  end
end
