local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local a = string.find(v, '|', 1, true)
local b = a and string.find(v, '|', a + 1, true)
if not b or string.find(v, '|', b + 1, true) then return 0 end
local head, queue, void = string.sub(v, 1, a - 1), string.sub(v, a + 1, b - 1), string.sub(v, b + 1)
local q = ',' .. queue .. ','
local s, e = string.find(q, ',' .. ARGV[1] .. ',', 1, true)
local rc, rf, rk = string.match(head, '^~([^:]*):(%d+):(%d+)$')
local live = rc and redis.call('PTTL', KEYS[1]) > tonumber(rk)
local freed = live and rc == ARGV[1] and ARGV[4] == '1'
if not s and not freed then return 0 end
if s then
  q = string.sub(q, 1, s) .. string.sub(q, e + 1)
  queue = string.sub(q, 2, -2)
end
if freed then head = '-' .. rf end
redis.call('SET', KEYS[1], head .. '|' .. queue .. '|' .. void, 'KEEPTTL')
local front = string.match(queue, '^[^,]+')
if not (ARGV[2] and front) or not (freed or s == 1) then return 1 end
local told = 'r:'
if freed then
elseif live then
  told = 'r:' .. rc
elseif not rc and string.sub(head, 1, 1) ~= '-' then
  told = 't:' .. redis.call('PTTL', KEYS[1])
end
redis.pcall(ARGV[3], ARGV[2] .. ':' .. front, told)
return 1
