-- SET(modes, shadow; tenant, expected, next, marker, clear, outcome...):
-- compare-and-set of one tenant's setting. expected is the stored JSON the
-- caller read ('' when the tenant had none); when it no longer matches
-- nothing changes and 0 is returned. With clear, the tenant's shadow counts
-- restart, so each ramp step is judged by its own comparisons.
local cur = redis.call('HGET', KEYS[1], ARGV[1]) or ''
if cur ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3], ARGV[4], '1')
if ARGV[5] == '1' then
  for i = 6, #ARGV do
    redis.call('HDEL', KEYS[2], ARGV[1] .. '\0' .. ARGV[i])
  end
end
return 1
