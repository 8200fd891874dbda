
for _, i in ipairs({2, 3, 4, 6, 9}) do
  if not string.find(ARGV[i] or '', '^%d+$') then
    return redis.error_reply('relaylock: argument ' .. i .. ' must be a non-negative integer')
  end
end
local token, n, limit, lease, client, retention, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[9])
if n < 1 or limit < 1 or n > limit then
  return redis.error_reply('relaylock: permits must be 1..limit')
end
local want = tonumber(ARGV[11] or '') or n
if want < n then want = n end
if want > limit then want = limit end
local entry = client .. ':' .. string.format('%d', want) .. ':' .. string.format('%d', limit)
