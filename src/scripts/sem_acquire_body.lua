
if foreign then return {0, -1} end
cut()
local fact = redis.call('HGET', KEYS[3], token)
local function remaining(t)
  local score = tonumber(redis.call('ZSCORE', KEYS[2], t) or '')
  if not score or score <= now then return 0 end
  return score - now
end
if fact then
  save(retention)
  local reply = {1, tonumber(string.match(fact, ':(%d+)$')), 0, remaining(token)}
  for i = 14, #ARGV - 1, 2 do
    local held = redis.call('HGET', KEYS[3], ARGV[i])
    reply[#reply + 1] = held and (tonumber(string.match(held, ':(%d+)$')) or 0) or 0
    reply[#reply + 1] = held and remaining(ARGV[i]) or 0
  end
  return reply
end
if void ~= '' and (tonumber(void) or 0) < now then void = '' end
if void ~= '' and redis.call('EXISTS', KEYS[4]) == 1 then
  save(retention)
  return {0, -2}
end
walk(client, grace)
local m = client ~= '' and ARGV[13] ~= '1' and tonumber(redis.call('HGET', KEYS[3], '~' .. client) or '')
if m and m < n then
  -- The client's reservation is too small for the waiter it woke (the
  -- rest of a partial take, or made for a smaller need): pass it on now,
  -- in queue order, instead of blocking the clients behind until its grace
  -- lapses. The client queues again below; the walk may serve it at once.
  redis.call('ZREM', KEYS[2], '~' .. client)
  redis.call('HDEL', KEYS[3], '~' .. client)
  used = used - m
  if used < 0 then used = 0 end
  walk(client, grace)
  m = tonumber(redis.call('HGET', KEYS[3], '~' .. client) or '')
  if m and m < n then m = nil end
end
local first = string.match(queue, '^([^:,]+)')
local avail = used
if m then avail = used - m end
if (m or queue == '' or first == client) and avail + n <= limit then
  local left = 0
  if m then
    if m > n then
      left = m - n
      redis.call('HSET', KEYS[3], '~' .. client, string.format('%d', left))
    else
      redis.call('ZREM', KEYS[2], '~' .. client)
      redis.call('HDEL', KEYS[3], '~' .. client)
    end
    used = avail + (m - n)
  end
  local fence = now_us
  if last >= fence then fence = last + 1 end
  last = fence
  local fs = string.format('%d', fence)
  redis.call('ZADD', KEYS[2], now + lease, token)
  redis.call('HSET', KEYS[3], token, string.format('%d', n) .. ':' .. fs)
  used = used + n
  local lease0 = lease
  -- A batch (a read-write lock's readers): ARGV[14..] are `token, lease_ms`
  -- pairs of other local waiters of the caller's client, each taking `n`
  -- more permits: from what is left of the client's reservation, or, when
  -- the caller was admitted without one (its client first, or nobody
  -- queued), from the free permits. A token that already holds (a replay)
  -- gets its fence again; a voided one, or one that does not fit, gets 0.
  local batch = {}
  for i = 14, #ARGV - 1, 2 do
    local t, l = ARGV[i], tonumber(ARGV[i + 1])
    local f, rem = 0, 0
    local held = redis.call('HGET', KEYS[3], t)
    if held then
      f = tonumber(string.match(held, ':(%d+)$')) or 0
      rem = remaining(t)
    elseif l and l > 0 and not (void ~= '' and redis.call('EXISTS', KEYS[1] .. ':void:' .. t) == 1) then
      local take = false
      if left >= n then
        left = left - n
        take = true
      elseif not m and used + n <= limit then
        used = used + n
        take = true
      end
      if take then
        f = now_us
        if last >= f then f = last + 1 end
        last = f
        redis.call('ZADD', KEYS[2], now + l, t)
        redis.call('HSET', KEYS[3], t, string.format('%d', n) .. ':' .. string.format('%d', f))
        rem = l
        if l > lease then lease = l end
      end
    end
    batch[#batch + 1] = f
    batch[#batch + 1] = rem
  end
  if m and #batch > 0 then
    if left > 0 then
      redis.call('HSET', KEYS[3], '~' .. client, string.format('%d', left))
    else
      redis.call('ZREM', KEYS[2], '~' .. client)
      redis.call('HDEL', KEYS[3], '~' .. client)
    end
  end
  if ARGV[10] == '1' and client ~= '' then
    -- Other local waiters of this client still want permits. While some of
    -- its reservation is left, they take that (the caller wakes the next),
    -- and its queue entry, if any, stays. Once it is used up, the client
    -- keeps a place at the back (round robin across clients) at their
    -- need, and if that fits now (nobody ahead waits, permits are free) it
    -- is reserved at once and counted in `left`: so a client's waiters fill
    -- free permits one after another without waiting for a release.
    -- After a batch, `want` (all the client's waiters) less those this call
    -- admitted is what the rest still want.
    local rest = want
    if #batch > 0 then
      rest = want - n
      for i = 1, #batch, 2 do if batch[i] > 0 then rest = rest - n end end
    end
    if left == 0 and rest > 0 then
      dequeue(client)
      local e = client .. ':' .. string.format('%d', rest) .. ':' .. string.format('%d', limit)
      if queue == '' then queue = e else queue = queue .. ',' .. e end
      walk(client, grace)
      left = tonumber(redis.call('HGET', KEYS[3], '~' .. client) or '0') or 0
    elseif left == 0 then
      dequeue(client)
    end
  elseif queued(client) then
    dequeue(client)
  end
  save(lease + retention)
  tell(ARGV[8], ARGV[7], nil, ARGV[12])
  local reply = {1, fence, left, lease0}
  for _, x in ipairs(batch) do reply[#reply + 1] = x end
  return reply
end
local joined = false
if client ~= '' and not queued(client) then
  if queue == '' then queue = entry else queue = queue .. ',' .. entry end
  joined = true
elseif client ~= '' then
  local es = {}
  for e in string.gmatch(queue, '[^,]+') do
    if string.sub(e, 1, #client + 1) == client .. ':' then e = entry end
    es[#es + 1] = e
  end
  queue = table.concat(es, ',')
  if KEYS[6] then redis.pcall('PEXPIRE', KEYS[6], retention) end
end
save(retention)
if joined and KEYS[6] then
  redis.pcall('HSET', KEYS[6], client, string.format('%d', now))
  local nf = redis.pcall('HLEN', KEYS[6])
  if type(nf) == 'number' and nf > 32 then
    local inq, nq = {}, 0
    for e in string.gmatch(queue, '[^,]+') do
      local c = string.match(e, '^([^:]+):')
      if c then inq[c] = true; nq = nq + 1 end
    end
    if nf > 2 * nq + 32 then
      for _, c in ipairs(redis.pcall('HKEYS', KEYS[6])) do
        if not inq[c] then redis.pcall('HDEL', KEYS[6], c) end
      end
    end
  end
  redis.pcall('PEXPIRE', KEYS[6], retention)
end
tell(ARGV[8], ARGV[7], client, ARGV[12])
-- The bound: the soonest expiry among the holds and this client's own
-- reservation; other clients' reservations are covered by their messages'
-- grace timers, and counting them would poll every 50 ms under load.
local soonest = redis.call('ZRANGE', KEYS[2], 0, 15, 'WITHSCORES')
local bound = 50
for i = 1, #soonest, 2 do
  local member = soonest[i]
  if string.sub(member, 1, 1) ~= '~' or member == '~' .. client or i == #soonest - 1 then
    bound = tonumber(soonest[i + 1]) - now
    break
  end
end
if bound < 1 then bound = 1 end
return {0, bound}
