-- GAP(hash; at_ms, margin_ms) -> the new reset_at (ms, string). Raises
-- reset_at to at_ms + margin_ms, where at_ms 'now' means this server's
-- clock: a reset's time comes from a clock the clock guard vouches for
-- (Redis, or Postgres through the marker), and the margin covers commit
-- timestamps taken before commits are visible plus two hosts' clock skew
-- (cache.ResetMargin). reset_at never moves backwards.
local at
if ARGV[1] == 'now' then
  local t = redis.call('TIME')
  at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
else
  at = tonumber(ARGV[1])
end
local target = at + tonumber(ARGV[2])
local cur = tonumber(redis.call('HGET', KEYS[1], 'reset_at'))
if cur == nil or target > cur then
  redis.call('HSET', KEYS[1], 'reset_at', string.format('%d', target))
  return string.format('%d', target)
end
return string.format('%d', cur)
