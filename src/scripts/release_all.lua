end
-- A multi-key release, every key of KEYS (all in one slot in a cluster)
-- released as RELEASE releases one with its fence known and no `next`:
-- ARGV `[token, retention_ms, client, grace_ms, publish, requeue, fence_1,
-- fence_2, ...]`, `requeue` one character per key (`'1'`: this client
-- still has local waiters of that key). The reply is RELEASE's code for
-- each key, in order.
local out = {}
for i = 1, #KEYS do
  out[i] = one({KEYS[i]}, {ARGV[1], ARGV[6 + i], KEYS[i] .. ':ch', ARGV[2], ARGV[3], ARGV[4],
    ARGV[5], string.sub(ARGV[6], i, i)})
end
return out
