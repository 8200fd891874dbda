
local t, fs = ARGV[1], ARGV[2]
local v = redis.call('GET', KEYS[1])
-- The common release: a hold the fast path took, nobody queued, its fence
-- known, no `next`, not an operator's. The fence goes into the record's
-- ring: slot `A` to `` ` `` by its remainder mod 32, the next slot (every
-- fence is the one before it plus one, mod 32: see `fence.lua`). (It comes
-- before `fence.lua`'s function, whose closure would cost an allocation
-- that this path does not need.)
if v == t and fs ~= '' and (ARGV[9] or '') == '' and ARGV[12] ~= '0' then
  redis.call('DEL', KEYS[1])
  local record = KEYS[1] .. ':f'
  -- A new field (the record's first releases): make sure the record has a
  -- TTL (one re-made by this HSET, after an eviction of the record alone,
  -- has none).
  if redis.call('HSET', record, string.char(65 + tonumber(fs) % 32), fs) == 1
    and redis.call('PTTL', record) == -1 then
    -- The retention: the lean call's default, or the full call's argument.
    redis.call('PEXPIRE', record, #ARGV == 4 and 60000 or ARGV[4])
  end
  return 1
end
