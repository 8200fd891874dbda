-- The single-key script that follows, as a function of one key's KEYS and
-- ARGV (its names shadow the call's own), for a multi-key script that runs
-- it once per key: the driver after it closes the function with `end`.
local function one(KEYS, ARGV)
