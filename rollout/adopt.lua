-- ADOPT(modes, gen): a copy written by a release before generations (its
-- marker but no generation) becomes generation 1, so it can be recorded.
-- Returns the copy's generation.
if redis.call('HEXISTS', KEYS[1], '_written') == 0 then
  return 0
end
local gen = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if gen == 0 then
  gen = 1
  redis.call('SET', KEYS[2], gen)
end
return gen
