-- PARTITIONS(hash; n) -> 1 raised, 0 kept: raises the watermark's partition
-- count to n, never lowers it (W is a promise about every partition a
-- record may be on: a count read from a stale view must not drop one).
-- Raised from an earlier count, it records the growth (partitions_grown_from,
-- partitions_grown_at: this server's clock, unix ms), so `tidemark status`
-- can tell partitions that are new and pending their first watermark from
-- ones that lost it.
local n = tonumber(ARGV[1])
if n == nil or n < 1 then
  return redis.error_reply('ERR partition count is not a positive number')
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'partitions'))
if cur ~= nil and cur >= n then
  return 0
end
redis.call('HSET', KEYS[1], 'partitions', ARGV[1])
if cur ~= nil and cur > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'partitions_grown_from', string.format('%d', cur),
    'partitions_grown_at', string.format('%d', now))
end
return 1
