-- GCRA (generic cell rate algorithm): the source-read budget shared by every
-- serve process. One string key per class holds the theoretical arrival time
-- (TAT) in microseconds of Redis server time, so processes with skewed clocks
-- share one honest bucket.
-- KEYS[1]  the class's bucket key
-- ARGV[1]  emission interval in microseconds (1e6 / rate)
-- ARGV[2]  burst tolerance in microseconds
-- Returns {1, 0} when the read is admitted, {0, retry_after_us} when not.
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local new_tat = tat + interval
local allow_at = new_tat - tolerance
if allow_at > now then
  return {0, allow_at - now}
end
-- The key can vanish once the bucket is full again: a fresh bucket is full.
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.floor((new_tat - now) / 1000) + 1000)
return {1, 0}
