-- FASTPUT(fast; ttl_ms, process, n_old, old_key1..old_keyN, key1, rate1, ...)
-- Replaces a serve process's entries in the fast hot set: deletes the keys
-- it published last time, then writes "<process> <key>" = "<rate> <expiry>"
-- for each key, the expiry ttl_ms from now on this server's clock.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local proc = ARGV[2]
local nold = tonumber(ARGV[3])
for i = 4, 3 + nold do
  redis.call('HDEL', KEYS[1], proc .. ' ' .. ARGV[i])
end
local exp = string.format('%d', now + tonumber(ARGV[1]))
for i = 4 + nold, #ARGV, 2 do
  redis.call('HSET', KEYS[1], proc .. ' ' .. ARGV[i], ARGV[i + 1] .. ' ' .. exp)
end
return 1
