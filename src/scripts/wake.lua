
local channel, publish, fence, token = ARGV[1], ARGV[2], ARGV[5] or '', ARGV[6] or ''
local found = {channel, ARGV[4]}
if ARGV[3] ~= '1' then
  local v = redis.call('GET', KEYS[1])
  if v and fence ~= '' then
    local head = string.match(v, '^[^|]*')
    if head == '-' .. fence or string.find(head, '^~[^:]*:' .. fence .. ':') then return -1 end
  end
  -- A lock's operator release notes the token it released in the record.
  if token ~= '' and redis.call('HGET', KEYS[1] .. ':f', 'u') == token then return -1 end
  local list = 'CHANNELS'
  if publish == 'SPUBLISH' then list = 'SHARDCHANNELS' end
  local pattern = string.gsub(channel .. ':', '[%*%?%[%]\\]', '\\%0') .. '*'
  found = redis.pcall('PUBSUB', list, pattern)
  if type(found) ~= 'table' or found.err then return 0 end
end
local told = 0
for _, c in ipairs(found) do
  if c ~= '' and type(redis.pcall(publish, c, 'r:')) == 'number' then told = told + 1 end
end
return told
