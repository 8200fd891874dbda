
if #KEYS % 3 ~= 0 or #ARGV ~= 2 + 2 * (#KEYS / 3) then
  return redis.error_reply('relaylock: three names and two arguments per hold')
end
for i = 2, #ARGV do
  if i % 2 == 0 and not string.find(ARGV[i], '^%d+$') then
    return redis.error_reply('relaylock: argument ' .. i .. ' must be a non-negative integer')
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local retention = tonumber(ARGV[2])
local mode = ARGV[1]
local out = {}
for h = 1, #KEYS / 3 do
  local k, token, lease = 3 * (h - 1), ARGV[1 + 2 * h], tonumber(ARGV[2 + 2 * h])
  local fact = nil
  if mode == '2' then
    local bar = string.find(token, '|', 1, true)
    fact = ''
    if bar then token, fact = string.sub(token, 1, bar - 1), string.sub(token, bar + 1) end
  end
  local score = redis.call('ZSCORE', KEYS[k + 2], token)
  if not score or tonumber(score) <= now or (fact and redis.call('HGET', KEYS[k + 3], token) ~= fact) then
    out[h] = 0
  else
    -- Mode '2' (`fact` given): never earlier, never shorter, always written.
    local want, keep = now + lease, lease + retention
    if fact and tonumber(score) > want then want = tonumber(score) end
    if fact or mode ~= '1' or tonumber(score) < want then
      redis.call('ZADD', KEYS[k + 2], 'XX', want, token)
      for i = 1, 3 do
        local p = redis.call('PTTL', KEYS[k + i])
        if fact then
          if p >= keep then redis.call('PEXPIRE', KEYS[k + i], p + 1) else redis.call('PEXPIRE', KEYS[k + i], keep) end
        elseif p == -1 or (p >= 0 and p < keep) then
          redis.call('PEXPIRE', KEYS[k + i], keep)
        end
      end
    end
    out[h] = 1
  end
end
return out
