-- RAISE(hash; field, value): sets field to value unless it already holds a
-- value at least as high. Watermarks and reset_at never move backwards.
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if cur == nil or tonumber(ARGV[2]) > cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
