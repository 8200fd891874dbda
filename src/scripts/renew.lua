local mode, retention = ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS do
  local lock = KEYS[i]
  local t = ARGV[2 * i + 1]
  local lease = tonumber(ARGV[2 * i + 2])
  local v = redis.call('GET', lock)
  local mine = false
  if v and string.sub(v, 1, #t) == t then
    local c = string.byte(v, #t + 1)
    if mode == '2' then mine = c == 124 else mine = c == nil or c == 58 or c == 124 end
  end
  if mine then
    if mode == '2' then
      local p = redis.call('PTTL', lock)
      if p >= lease then lease = p + 1 end
      redis.call('PEXPIRE', lock, lease)
    elseif mode ~= '1' or redis.call('PTTL', lock) < lease then
      redis.call('PEXPIRE', lock, lease)
    end
    -- The record outlives the hold: its counter keeps the fences rising.
    redis.call('PEXPIRE', lock .. ':f', lease + retention)
    out[i] = 1
  elseif v and string.sub(v, 1, 1) ~= '-' then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
