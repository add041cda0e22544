-- RAISE(hash; field, value[, identity]): sets field to value unless it
-- already holds a value at least as high. Watermarks and reset_at never move
-- backwards. With identity, it also stores the cache tier's identity the
-- writer verified (field 'identity'), so an applier that starts later can
-- tell a restart or failover it did not see.
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local raised = 0
if cur == nil or tonumber(ARGV[2]) > cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  raised = 1
end
if ARGV[3] then
  redis.call('HSET', KEYS[1], 'identity', ARGV[3])
end
return raised
