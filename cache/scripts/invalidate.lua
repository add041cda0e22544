-- INVALIDATE(key; version, floor_ttl_ms) -> 0 applied, 1 duplicate, 2 older.
-- Raises floor; when newer than the cached value it bumps gen, revokes the
-- lease and marks the value stale. Duplicates and older events change nothing.
local key = KEYS[1]
local ver = tonumber(ARGV[1])
local h = redis.call('HMGET', key, 'floor', 'v', 'gen', 'tok')
local floor = tonumber(h[1])
if floor then
  if ver < floor then return 2 end
  if ver == floor then return 1 end
end
local v = tonumber(h[2])
if v == nil or ver > v then
  local gen = string.format('%d', (tonumber(h[3]) or 0) + 1)
  if v then
    redis.call('HSET', key, 'floor', ARGV[1], 'gen', gen, 'stale', '1')
  else
    redis.call('HSET', key, 'floor', ARGV[1], 'gen', gen)
  end
  if h[4] then
    redis.call('HDEL', key, 'tok', 'texp')
  end
else
  redis.call('HSET', key, 'floor', ARGV[1])
end
-- Keep the floor long enough that a late fill of an older read cannot land.
if not (h[1] or h[2] or h[3] or h[4]) then
  redis.call('PEXPIRE', key, ARGV[2])
else
  local ttl = redis.call('PTTL', key)
  if ttl == -1 or ttl < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', key, ARGV[2])
  end
end
return 0
