-- INVALIDATE(key; version, floor_ttl_ms) -> 0 applied, 1 duplicate, 2 older.
-- Raises floor; when newer than the cached value it bumps gen, revokes the
-- lease and the replica manifest and marks the value stale. Duplicates and older events change nothing.
-- It runs for every change event: three Redis calls on the common paths and
-- no Lua work that a new key does not need.
local key = KEYS[1]
local h = redis.call('HMGET', key, 'floor', 'v', 'gen', 'tok', 'rep')
if h[1] then
  local c = vcmp(ARGV[1], h[1])
  if c < 0 then return 2 end
  if c == 0 then return 1 end
end
if h[2] and vcmp(ARGV[1], h[2]) <= 0 then
  -- Only reachable if the floor was lost (fill always raises it): restore
  -- it without touching a value that is not older, nor its TTL.
  redis.call('HSET', key, 'floor', ARGV[1])
  if redis.call('PTTL', key) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', key, ARGV[2])
  end
  return 0
end
local gen = '1'
if h[3] then
  gen = string.format('%d', tonumber(h[3]) + 1)
end
if h[2] then
  redis.call('HSET', key, 'floor', ARGV[1], 'gen', gen, 'stale', '1')
else
  redis.call('HSET', key, 'floor', ARGV[1], 'gen', gen)
end
if h[4] then
  redis.call('HDEL', key, 'tok', 'texp')
end
-- In the same step as the floor: no reader learns a copy set of an older
-- version once this returns (cache/replica.go).
if h[5] then
  redis.call('HDEL', key, 'rep')
end
-- The floor must outlive any fill of an older read (floor_ttl); a stale value
-- is no longer extended by the watermark, so it dies within the hard lifetime
-- (<= floor_ttl): setting the TTL outright never cuts a servable entry short.
redis.call('PEXPIRE', key, ARGV[2])
return 0
