-- SET(modes, shadow, gen, lost; tenant, expected, next, marker, clear, outcome...):
-- compare-and-set of one tenant's setting. expected is the stored JSON the
-- caller read ('' when the tenant had none); when it no longer matches
-- nothing changes and 0 is returned. Otherwise the copy's generation is
-- raised and returned: the generation of a hash without its marker (lost
-- by the cache tier) counts as 0, so a change made on a lost copy is behind
-- the durable record and is never recorded over it. A loss note is cleared:
-- an operator acted. With clear, the tenant's shadow counts restart, so each
-- ramp step is judged by its own comparisons.
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then
  return 0
end
local gen = 0
if redis.call('HEXISTS', KEYS[1], ARGV[4]) == 1 then
  gen = tonumber(redis.call('GET', KEYS[3]) or '0') or 0
end
gen = gen + 1
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], ARGV[4], '1')
redis.call('SET', KEYS[3], gen)
redis.call('DEL', KEYS[4])
if ARGV[5] == '1' then
  for i = 6, #ARGV do
    redis.call('HDEL', KEYS[2], ARGV[1] .. '\0' .. ARGV[i])
  end
end
return gen
