
if foreign then return {0, 0} end
cut()
if ARGV[2] == '' then
  redis.call('SET', KEYS[4], '1', 'PX', retention)
  local til = now + retention
  local old = tonumber(redis.call('GET', KEYS[5]) or '')
  if old and old > til then til = old end
  if void ~= '' and (tonumber(void) or 0) > til then til = tonumber(void) end
  void = string.format('%d', til)
  redis.call('SET', KEYS[5], void, 'PXAT', til)
end
local fact = redis.call('HGET', KEYS[3], ARGV[1])
local fs = fact and string.match(fact, ':(%d+)$')
if fact and (ARGV[2] == '' or fs == ARGV[2]) then
  local n = tonumber(string.match(fact, '^(%d+)'))
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  used = used - n
  if used < 0 then used = 0 end
  if ARGV[13] ~= '0' then
    if ring == '' then ring = fs else ring = fs .. ' ' .. ring end
    local cap = tonumber(ARGV[5])
    if #ring > cap then ring = string.match(string.sub(ring, 1, cap + 1), '^(.*) ') or fs end
  end
  dequeue(ARGV[6])
  if ARGV[9] == '1' then
    local e = ARGV[6] .. ':' .. ARGV[10] .. ':' .. ARGV[11]
    if queue == '' then queue = e else queue = queue .. ',' .. e end
  end
  walk(ARGV[6], grace)
  save(retention)
  tell(ARGV[8], ARGV[3], ARGV[6], ARGV[12])
  return {1, #told, fits()}
end
walk(ARGV[6], grace)
if v or ARGV[2] == '' then save(retention) end
tell(ARGV[8], ARGV[3], ARGV[6], ARGV[12])
if ARGV[2] ~= '' and ring ~= '' and string.find(' ' .. ring .. ' ', ' ' .. ARGV[2] .. ' ', 1, true) then
  return {2, fits()}
end
return {0, fits()}
