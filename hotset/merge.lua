-- HOTMERGE(zset, epoch; tau_ms, max_keys, member1, n1, member2, n2, ...)
-- Adds n reads to each member of the namespace's hot set with forward decay:
-- a read at time t weighs exp((t - landmark)/tau), so older reads count
-- exp(-age/tau) relative to new ones without rewriting every score. When the
-- weights grow large the scores are rescaled and the landmark moves to now.
-- Keeps the max_keys highest scores. Returns the set's size.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tau = tonumber(ARGV[1])
local maxk = tonumber(ARGV[2])
local land = tonumber(redis.call('HGET', KEYS[2], 'landmark'))
if not land then
  land = now
  redis.call('HSET', KEYS[2], 'landmark', string.format('%d', now))
end
redis.call('HSET', KEYS[2], 'tau', ARGV[1])
local x = (now - land) / tau
if x > 20 then
  local f = math.exp(-x)
  local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #all, 2 do
    redis.call('ZADD', KEYS[1], tonumber(all[i + 1]) * f, all[i])
  end
  redis.call('HSET', KEYS[2], 'landmark', string.format('%d', now))
  x = 0
end
local w = math.exp(x)
for i = 3, #ARGV, 2 do
  redis.call('ZINCRBY', KEYS[1], tonumber(ARGV[i + 1]) * w, ARGV[i])
end
local n = redis.call('ZCARD', KEYS[1])
if n > maxk then
  redis.call('ZREMRANGEBYRANK', KEYS[1], 0, n - maxk - 1)
  n = maxk
end
return n
