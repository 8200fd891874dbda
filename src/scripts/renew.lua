
local mode = ARGV[1]
local out = {}
for i = 1, #KEYS do
  local lock = KEYS[i]
  local mine = ARGV[2 * i] .. ':'
  if mode == '2' then mine = ARGV[2 * i] .. '|' end
  local lease = tonumber(ARGV[2 * i + 1])
  local v = redis.call('GET', lock)
  if v and string.sub(v, 1, #mine) == mine then
    if mode == '2' then
      local p = redis.call('PTTL', lock)
      if p >= lease then lease = p + 1 end
      redis.call('PEXPIRE', lock, lease)
    elseif mode ~= '1' or redis.call('PTTL', lock) < lease then
      redis.call('PEXPIRE', lock, lease)
    end
    out[i] = 1
  elseif v and string.sub(v, 1, 1) ~= '-' then
    out[i] = -1
  else
    out[i] = 0
  end
end
return out
