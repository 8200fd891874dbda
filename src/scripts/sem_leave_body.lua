
if foreign or not v then return 0 end
cut()
local found = queued(ARGV[1])
dequeue(ARGV[1])
-- A reservation made for the leaver is nobody's now, unless a waiter of
-- its client came meanwhile (`free` not given): free it at once rather
-- than at the end of its grace.
local mine = ARGV[6] == '1' and tonumber(redis.call('HGET', KEYS[3], '~' .. ARGV[1]) or '')
if mine then
  found = true
  redis.call('ZREM', KEYS[2], '~' .. ARGV[1])
  redis.call('HDEL', KEYS[3], '~' .. ARGV[1])
  used = used - mine
  if used < 0 then used = 0 end
end
walk('', tonumber(ARGV[4]) or 50)
store()
tell(ARGV[3], ARGV[2], nil, ARGV[5])
if found then return 1 end
return 0
