
for _, i in ipairs({4, 5, 7}) do
  if not string.find(ARGV[i] or '', '^%d+$') then
    return redis.error_reply('relaylock: argument ' .. i .. ' must be a non-negative integer')
  end
end
if ARGV[9] == '1' and (not string.find(ARGV[10] or '', '^%d+$') or not string.find(ARGV[11] or '', '^%d+$')
    or tonumber(ARGV[10]) < 1 or tonumber(ARGV[10]) > tonumber(ARGV[11])) then
  return redis.error_reply('relaylock: a requeue needs 1 <= n <= limit')
end
local retention, grace = tonumber(ARGV[4]), tonumber(ARGV[7])
