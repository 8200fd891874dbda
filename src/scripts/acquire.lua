local t, client = ARGV[1], ARGV[3]
local retention = tonumber(ARGV[6] or '') or 60000
-- The common acquisition, the fast path: the lock is free (its name
-- absent). The value is the token alone; the fence comes from the record.
-- Not for a `min_replicas` call (`exact`), whose check wants the fence in
-- the value. While a void marker of the lock may live (its `voids` key,
-- which a release of an abandoned acquisition writes), this token's own
-- marker is checked: an abandoned call's late copy takes nothing.
if ARGV[7] ~= '1' and redis.call('SET', KEYS[1], t, 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[3] or KEYS[1] .. ':void') == 1
    and redis.call('EXISTS', KEYS[2] or KEYS[1] .. ':void:' .. t) == 1 then
    redis.call('DEL', KEYS[1])
    return -1
  end
  return next_fence(KEYS[1], 0, tonumber(ARGV[2]) + retention)
end
local v = redis.call('GET', KEYS[1])
local head, queue, void = '', '', ''
if v then
  local a = string.find(v, '|', 1, true)
  local b = a and string.find(v, '|', a + 1, true)
  if not a then
    -- A hold taken by the `SET NX` above: the token alone, of relaylock's
    -- shape (anything else is not relaylock's).
    if #v == 33 and string.find(v, '^%x+%-%x+$') and string.byte(v, 17) == 45 then head = v end
  elseif b and not string.find(v, '|', b + 1, true) then
    head = string.sub(v, 1, a - 1)
    if b > a + 1 then queue = string.sub(v, a + 1, b - 1) end
    if b < #v then void = string.sub(v, b + 1) end
  end
  if head == '' or (void ~= '' and not string.find(void, '^%d+$')) then
    return -3 - redis.call('PTTL', KEYS[1])
  end
  if head == t or (string.byte(head, #t + 1) == 58 and string.sub(head, 1, #t) == t) then
    local others = 0
    if queue ~= '' then others = 1 end
    local fence
    if head == t then
      -- Our own fast-path hold, whose reply never came back (fred replayed
      -- this call): nobody saw its fence, so it takes the next one.
      fence = next_fence(KEYS[1], 0, tonumber(ARGV[2]) + retention)
      redis.call('SET', KEYS[1], t .. ':' .. string.format('%d', fence) .. '|' .. queue .. '|' .. void, 'KEEPTTL')
    else
      fence = tonumber(string.sub(head, #t + 2))
    end
    return {1, fence, others, redis.call('PTTL', KEYS[1])}
  end
end
local last, pttl = 0, nil
local kind = string.sub(head, 1, 1)
if not v then
elseif kind == '-' then
  last = tonumber(string.sub(head, 2)) or 0
elseif kind == '~' then
  local rc, rf, rk = string.match(head, '^~([^:]*):(%d+):(%d+)$')
  last = tonumber(rf) or 0
  if not (rc == client and client ~= '') then
    local left = redis.call('PTTL', KEYS[1]) - (tonumber(rk) or 0)
    if left > 0 then pttl = left end
  end
else
  pttl = redis.call('PTTL', KEYS[1])
end
if pttl then
  local since = KEYS[4] or (not KEYS[2] and KEYS[1] .. ':q')
  if client ~= '' and not string.find(',' .. queue .. ',', ',' .. client .. ',', 1, true) then
    if void ~= '' and redis.call('EXISTS', KEYS[2] or KEYS[1] .. ':void:' .. t) == 1 then return -1 end
    if queue == '' then queue = client else queue = queue .. ',' .. client end
    redis.call('SET', KEYS[1], head .. '|' .. queue .. '|' .. void, 'KEEPTTL')
    if since then
      local tm = redis.call('TIME')
      -- Only a new field makes the record longer: count it then.
      local n = redis.pcall('HSET', since, client, string.format('%d', tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)))
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
      redis.pcall('PEXPIRE', since, retention)
    end
  elseif client ~= '' and since then
    redis.pcall('PEXPIRE', since, retention)
  end
  return -3 - pttl
end
if not v then
  void = redis.call('GET', KEYS[3] or KEYS[1] .. ':void') or ''
end
if void ~= '' then
  local tm = redis.call('TIME')
  if (tonumber(void) or 0) < tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000) then
    void = ''
  elseif redis.call('EXISTS', KEYS[2] or KEYS[1] .. ':void:' .. t) == 1 then
    return -1
  end
end
local fence = next_fence(KEYS[1], last, tonumber(ARGV[2]) + retention)
if client ~= '' and queue ~= '' then
  local q = ',' .. queue .. ','
  local s, e = string.find(q, ',' .. client .. ',', 1, true)
  if s then q = string.sub(q, 1, s) .. string.sub(q, e + 1); queue = string.sub(q, 2, -2) end
end
redis.call('SET', KEYS[1], t .. ':' .. string.format('%d', fence) .. '|' .. queue .. '|' .. void, 'PX', ARGV[2])
if queue ~= '' then
  redis.pcall(ARGV[5] or 'PUBLISH', (ARGV[4] or KEYS[1] .. ':ch') .. ':' .. string.match(queue, '^[^,]+'), 't:' .. ARGV[2])
end
return fence
