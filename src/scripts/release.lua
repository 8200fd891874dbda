-- The lean call's four arguments stand for the full list with the defaults
-- (the channel is derived where a message needs it).
local channel, retention, client, grace, publish, requeue
if #ARGV == 4 then
  retention, client, grace, publish, requeue = '60000', ARGV[3], 50, 'PUBLISH', ARGV[4]
else
  channel, retention, client, grace, publish, requeue = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8]
end
local head, queue, void = nil, '', ''
if v then
  local a = string.find(v, '|', 1, true)
  local b = a and string.find(v, '|', a + 1, true)
  if not a then
    if #v == 33 and string.find(v, '^%x+%-%x+$') and string.byte(v, 17) == 45 then head = v end
  elseif b and not string.find(v, '|', b + 1, true) then
    head = string.sub(v, 1, a - 1)
    if b > a + 1 then queue = string.sub(v, a + 1, b - 1) end
    if b < #v then void = string.sub(v, b + 1) end
    if void ~= '' and not string.find(void, '^%d+$') then head, queue, void = nil, '', '' end
  end
end
-- Closures cost an allocation each: `voided` is made only for an
-- abandoned acquisition, the one caller.
local voided
if fs == '' then voided = function()
  redis.call('SET', KEYS[2], '1', 'PX', retention)
  local tm = redis.call('TIME')
  local til = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000) + tonumber(retention)
  local old = tonumber(redis.call('GET', KEYS[3]) or '')
  if old and old > til then til = old end
  if void ~= '' and tonumber(void) > til then til = tonumber(void) end
  void = string.format('%d', til)
  redis.call('SET', KEYS[3], void, 'PXAT', til)
end end
if head and (head == t or (string.byte(head, #t + 1) == 58 and string.sub(head, 1, #t) == t)) then
  if voided then voided() end
  local fence = fs
  if fence == '' and head ~= t then fence = string.sub(head, #t + 2) end
  -- The fence to write into the record's ring (none for an operator's
  -- release, nor for a fence nobody knows): its slot by its remainder mod
  -- 32; with `next`'s fence when the lock goes to `next`.
  local released = fence ~= '' and ARGV[12] ~= '0' and fence
  local record = KEYS[1] .. ':f'
  if fence == '' then fence = '0' end
  local best, rest, again = nil, nil, false
  if queue ~= '' then
    rest = {}
    for q in string.gmatch(queue, '[^,]+') do
      if q == client then
        again = true
      elseif best then
        rest[#rest + 1] = q
      else
        best = q
      end
    end
  end
  if best then
    if released and redis.call('HSET', record, string.char(65 + tonumber(released) % 32), released) == 1
      and redis.call('PTTL', record) == -1 then
      redis.call('PEXPIRE', record, retention)
    end
    if again or requeue == '1' then rest[#rest + 1] = client end
    redis.call('SET', KEYS[1], '~' .. best .. ':' .. fence .. ':' .. retention .. '|' .. table.concat(rest, ',') .. '|' .. void, 'PX', tonumber(retention) + grace)
    local told = 'r:' .. best
    channel = channel or KEYS[1] .. ':ch'
    redis.pcall(publish, channel .. ':' .. best, told)
    if rest[1] == client then return 5 end
    if rest[1] then redis.pcall(publish, channel .. ':' .. rest[1], told) end
    return 3
  end
  local nxt = ARGV[9] or ''
  if nxt ~= '' and fs ~= '' then
    if void ~= '' then
      local tm = redis.call('TIME')
      if (tonumber(void) or 0) < tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000) then void = '' end
    end
    if void == '' or redis.call('EXISTS', KEYS[4]) == 0 then
      local nf = next_fence(KEYS[1], tonumber(fence), tonumber(ARGV[10]) + tonumber(retention), released)
      local q = ''
      if (ARGV[11] or requeue) == '1' then q = client end
      redis.call('SET', KEYS[1], nxt .. ':' .. string.format('%d', nf) .. '|' .. q .. '|' .. void, 'PX', ARGV[10])
      return -nf
    end
  end
  -- Free. Nothing is kept in the lock's name (the record keeps the fence
  -- and the ring), unless a void marker may live: then a tombstone keeps the
  -- name present, so no acquire's first `SET NX` can take it. An operator's
  -- release leaves one too: it tells the holder's wake-up that its value
  -- was unlocked, not evicted.
  if released and redis.call('HSET', record, string.char(65 + tonumber(released) % 32), released) == 1
    and redis.call('PTTL', record) == -1 then
    redis.call('PEXPIRE', record, retention)
  end
  if ARGV[12] == '0' then
    -- An operator's release: the holder's wake-up finds its token here
    -- (see WAKE), and the record lives on as it was.
    if redis.call('HSET', record, 'u', t) == 1 and redis.call('PTTL', record) == -1 then
      redis.call('PEXPIRE', record, retention)
    end
  end
  if void ~= '' or ARGV[12] == '0' then
    redis.call('SET', KEYS[1], '-' .. fence .. '||' .. void, 'PX', retention)
  else
    redis.call('DEL', KEYS[1])
  end
  return 1
end
if voided then
  voided()
  if not v then
    redis.call('SET', KEYS[1], '-0||' .. void, 'PX', retention)
  elseif head then
    redis.call('SET', KEYS[1], head .. '|' .. queue .. '|' .. void, 'KEEPTTL')
  end
  return 0
end
-- A replay? Only a release writes a fence into the ring, and only this
-- path reads it: the ring's slots are the record's one-letter fields other
-- than `f` (an election's fields have two letters).
if fs ~= '' then
  local ring = redis.call('HGETALL', KEYS[1] .. ':f')
  for i = 1, #ring, 2 do
    if ring[i + 1] == fs and #ring[i] == 1 and ring[i] ~= 'f' then return 2 end
  end
end
return 0
