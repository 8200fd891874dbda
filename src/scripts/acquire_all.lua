end
-- A multi-key acquisition, every key of KEYS in order (all in one slot in
-- a cluster), never waiting: ARGV `[token, lease_ms, publish,
-- retention_ms]`. Each key is taken as ACQUIRE takes it for a caller that
-- will not wait (no queue entry), until the first one that is not free.
-- The reply is two integers per key tried: `fence, left` for a key taken
-- (`left` is the lease's remaining ms for a replayed take, `-1` for a full
-- lease from this call), then `code, 0` for the first key not taken, as
-- ACQUIRE's integer reply (`-3 - pttl`, or `-1` for a voided token); no
-- key after it is touched.
local out, n = {}, 0
local args = {ARGV[1], ARGV[2], '', nil, ARGV[3], ARGV[4]}
for i = 1, #KEYS do
  local r = one({KEYS[i]}, args)
  if type(r) == 'table' then
    out[n + 1], out[n + 2] = r[2], r[4]
  elseif r > 0 then
    out[n + 1], out[n + 2] = r, -1
  else
    out[n + 1], out[n + 2] = r, 0
    break
  end
  n = n + 2
end
return out
