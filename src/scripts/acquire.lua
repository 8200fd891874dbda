
local v = redis.call('GET', KEYS[1])
local client = ARGV[3]
local head, queue, ring, void = '', '', '', ''
if v then
  local a = string.find(v, '|', 1, true)
  local b = a and string.find(v, '|', a + 1, true)
  local c = b and string.find(v, '|', b + 1, true)
  if c then
    head = string.sub(v, 1, a - 1)
    if b > a + 1 then queue = string.sub(v, a + 1, b - 1) end
    if c > b + 1 then ring = string.sub(v, b + 1, c - 1) end
    if c < #v then void = string.sub(v, c + 1) end
  end
  if not c or (void ~= '' and not string.find(void, '^%d+$')) then
    return -3 - redis.call('PTTL', KEYS[1])
  end
  local t = ARGV[1]
  if string.byte(head, #t + 1) == 58 and string.sub(head, 1, #t) == t then
    local others = 0
    if queue ~= '' then others = 1 end
    return {1, tonumber(string.sub(head, #t + 2)), others, redis.call('PTTL', KEYS[1])}
  end
end
local last, reserved, pttl = 0, false, nil
local kind = string.sub(head, 1, 1)
if not v then
elseif kind == '-' then
  last = tonumber(string.sub(head, 2)) or 0
elseif kind == '~' then
  local rc, rf, rk = string.match(head, '^~([^:]*):(%d+):(%d+)$')
  last = tonumber(rf) or 0
  if rc == client and client ~= '' then
    reserved = true
  else
    local left = redis.call('PTTL', KEYS[1]) - (tonumber(rk) or 0)
    if left > 0 then pttl = left end
  end
else
  pttl = redis.call('PTTL', KEYS[1])
end
if pttl then
  local since = KEYS[4] or (not KEYS[2] and KEYS[1] .. ':q')
  if client ~= '' and not string.find(',' .. queue .. ',', ',' .. client .. ',', 1, true) then
    if void ~= '' and redis.call('EXISTS', KEYS[2] or KEYS[1] .. ':void:' .. ARGV[1]) == 1 then return -1 end
    if queue == '' then queue = client else queue = queue .. ',' .. client end
    redis.call('SET', KEYS[1], head .. '|' .. queue .. '|' .. ring .. '|' .. void, 'KEEPTTL')
    if since then
      local t = redis.call('TIME')
      -- Only a new field makes the record longer: count it then.
      local n = redis.pcall('HSET', since, client, string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)))
      if n == 1 then n = redis.pcall('HLEN', since) end
      if type(n) == 'number' and n > 32 then
        local inq, nq = {}, 0
        for c in string.gmatch(queue, '[^,]+') do inq[c] = true; nq = nq + 1 end
        if n > 2 * nq + 32 then
          for _, c in ipairs(redis.pcall('HKEYS', since)) do
            if not inq[c] then redis.pcall('HDEL', since, c) end
          end
        end
      end
      redis.pcall('PEXPIRE', since, tonumber(ARGV[6] or '') or 60000)
    end
  elseif client ~= '' and since then
    redis.pcall('PEXPIRE', since, tonumber(ARGV[6] or '') or 60000)
  end
  return -3 - pttl
end
if not v then
  void = redis.call('GET', KEYS[3] or KEYS[1] .. ':void') or ''
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if void ~= '' and (tonumber(void) or 0) < math.floor(now / 1000) then void = '' end
if void ~= '' and redis.call('EXISTS', KEYS[2] or KEYS[1] .. ':void:' .. ARGV[1]) == 1 then
  return -1
end
local fence = now
if last >= fence then fence = last + 1 end
if client ~= '' and queue ~= '' then
  local q = ',' .. queue .. ','
  local s, e = string.find(q, ',' .. client .. ',', 1, true)
  if s then q = string.sub(q, 1, s) .. string.sub(q, e + 1); queue = string.sub(q, 2, -2) end
end
local fs = string.format('%d', fence)
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fs .. '|' .. queue .. '|' .. ring .. '|' .. void, 'PX', ARGV[2])
if queue ~= '' then
  redis.pcall(ARGV[5] or 'PUBLISH', (ARGV[4] or KEYS[1] .. ':ch') .. ':' .. string.match(queue, '^[^,]+'), 't:' .. ARGV[2])
end
return fence
