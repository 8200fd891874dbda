
-- The lean call's four arguments stand for the full list with the defaults
-- (the channel is derived where a message needs it).
local channel, retention, ring_chars, client, grace, publish, requeue
if #ARGV == 4 then
  retention, ring_chars, client, grace, publish, requeue = '60000', 200, ARGV[3], 50, 'PUBLISH', ARGV[4]
else
  channel, retention, ring_chars, client, grace, publish, requeue = ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9]
end
local v = redis.call('GET', KEYS[1])
-- The ring stays in `v` (characters b + 1 .. c - 1): the common paths read
-- it in place, and copy it only into the value they write.
local head, queue, void, b, c = nil, '', '', nil, nil
if v then
  local a = string.find(v, '|', 1, true)
  b = a and string.find(v, '|', a + 1, true)
  c = b and string.find(v, '|', b + 1, true)
  if c then
    head = string.sub(v, 1, a - 1)
    if b > a + 1 then queue = string.sub(v, a + 1, b - 1) end
    if c < #v then void = string.sub(v, c + 1) end
    if void ~= '' and not string.find(void, '^%d+$') then head, queue, void = nil, '', '' end
  end
end
-- Closures cost an allocation each: `voided` is made only for an
-- abandoned acquisition, the one caller.
local voided
if ARGV[2] == '' then voided = function()
  redis.call('SET', KEYS[2], '1', 'PX', retention)
  local t = redis.call('TIME')
  local til = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(retention)
  local old = tonumber(redis.call('GET', KEYS[3]) or '')
  if old and old > til then til = old end
  if void ~= '' and tonumber(void) > til then til = tonumber(void) end
  void = string.format('%d', til)
  redis.call('SET', KEYS[3], void, 'PXAT', til)
end end
local t = ARGV[1]
if head and string.byte(head, #t + 1) == 58 and string.sub(head, 1, #t) == t then
  if voided then voided() end
  local fence = string.sub(head, #t + 2)
  -- The new ring, `rhead .. keep`: our fence, its difference to the
  -- ring's newest, and the older part of the ring that still fits, cut at
  -- a fence boundary without copying the ring first.
  local rhead, keep = fence, ''
  local r1 = c > b + 1 and string.match(v, '^%d+', b + 1)
  local d = r1 and tonumber(fence) - tonumber(r1)
  if d and d > 0 then
    local ds = string.format('%d', d)
    local room = ring_chars - #fence - 1 - #ds
    if room >= 0 then
      rhead = fence .. ' ' .. ds
      -- In `v`'s positions: r1 ends at s0, the ring at e.
      local s0, e = b + #r1, c - 1
      if e - s0 > room then
        local limit, p = s0 + room + 1, nil
        local from = limit - 17
        if from <= s0 then from = s0 + 1 end
        while true do
          local sp = string.find(v, ' ', from, true)
          while sp and sp <= limit do p = sp; sp = string.find(v, ' ', sp + 1, true) end
          if p or from == s0 + 1 then break end
          from = s0 + 1
        end
        e = (p or s0 + 1) - 1
      end
      if e > s0 then keep = string.sub(v, s0 + 1, e) end
    end
  end
  if ARGV[13] == '0' then rhead, keep = string.sub(v, b + 1, c - 1), '' end
  local tail = '|' .. rhead
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
    if again or requeue == '1' then rest[#rest + 1] = client end
    redis.call('SET', KEYS[1], '~' .. best .. ':' .. fence .. ':' .. retention .. '|' .. table.concat(rest, ',') .. tail .. keep .. '|' .. void, 'PX', tonumber(retention) + grace)
    local told = 'r:' .. best
    channel = channel or KEYS[1] .. ':ch'
    redis.pcall(publish, channel .. ':' .. best, told)
    if rest[1] == client then return 5 end
    if rest[1] then redis.pcall(publish, channel .. ':' .. rest[1], told) end
    return 3
  end
  local nxt = ARGV[10] or ''
  if nxt ~= '' and ARGV[2] ~= '' then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    if void ~= '' and (tonumber(void) or 0) < math.floor(now / 1000) then void = '' end
    if void == '' or redis.call('EXISTS', KEYS[4]) == 0 then
      local nf = now
      if tonumber(fence) >= nf then nf = tonumber(fence) + 1 end
      local q = ''
      if (ARGV[12] or requeue) == '1' then q = client end
      redis.call('SET', KEYS[1], nxt .. ':' .. string.format('%d', nf) .. '|' .. q .. tail .. keep .. '|' .. void, 'PX', ARGV[11])
      return -nf
    end
  end
  redis.call('SET', KEYS[1], '-' .. fence .. '|' .. tail .. keep .. '|' .. void, 'PX', retention)
  return 1
end
if voided then
  voided()
  if not v then
    redis.call('SET', KEYS[1], '-0|||' .. void, 'PX', retention)
  elseif head then
    redis.call('SET', KEYS[1], head .. '|' .. queue .. '|' .. string.sub(v, b + 1, c - 1) .. '|' .. void, 'KEEPTTL')
  end
  return 0
end
local fences = head and string.sub(v, b + 1, c - 1) or ''
if fences ~= '' then
  local f, r = tonumber(ARGV[2]), nil
  for d in string.gmatch(fences, '%d+') do
    if r then r = r - tonumber(d) else r = tonumber(d) end
    if r == f then return 2 end
    if not f or r < f then break end
  end
end
return 0
