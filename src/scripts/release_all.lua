end
-- A multi-key release, every key of KEYS (all in one slot in a cluster)
-- released as RELEASE releases one with no `next` (a fence `''`: an
-- acquisition abandoned in flight, whose token is voided on that key):
-- ARGV `[token, retention_ms, client, grace_ms, publish, requeue, fence_1,
-- fence_2, ...]`, `requeue` one character per key (`'1'`: this client
-- still has local waiters of that key). The reply is RELEASE's code for
-- each key, in order. A fast-path hold (the value is the token alone:
-- nobody queued) is released here as RELEASE's first lines release it;
-- any other key goes through RELEASE itself (`one`).
local t, retention = ARGV[1], ARGV[2]
local out = {}
for i = 1, #KEYS do
  local k, fs = KEYS[i], ARGV[6 + i]
  if fs ~= '' and redis.call('GET', k) == t then
    redis.call('DEL', k)
    local record = k .. ':f'
    if redis.call('HSET', record, string.char(65 + tonumber(fs) % 32), fs) == 1
      and redis.call('PTTL', record) == -1 then
      redis.call('PEXPIRE', record, retention)
    end
    out[i] = 1
  else
    -- The void marker and index names, which only the voiding reads.
    out[i] = one({k, k .. ':void:' .. t, k .. ':void'}, {t, fs, k .. ':ch', retention, ARGV[3],
      ARGV[4], ARGV[5], string.sub(ARGV[6], i, i)})
  end
end
return out
