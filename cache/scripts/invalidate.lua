-- INVALIDATE(key; version, floor_ttl_ms) -> 0 applied, 1 duplicate, 2 older,
-- 3 revoked.
-- Raises floor; when newer than the cached value it bumps gen, revokes the
-- lease and the replica manifest and marks the value stale.
-- A change is an invalidation whatever its version says (docs/design.md,
-- "Freshness watermark"): an event not above the floor (a write that did not
-- raise the version, or a duplicate) still marks stale a value observed
-- before now + clock_bound_ms (the change is visible before its event is
-- applied, so only a read started later surely saw it) and revokes the
-- lease (its read may have started before), replying 3; with nothing to
-- revoke it changes nothing and replies 1 or 2.
-- It runs for every change event: three Redis calls on the common paths and
-- no Lua work that a new key does not need.
local key = KEYS[1]
local h = redis.call('HMGET', key, 'floor', 'v', 'gen', 'tok', 'rep', 'obs', 'stale')
local c = 1
if h[1] then
  c = vcmp(ARGV[1], h[1])
end

local function nextgen()
  if h[3] then
    return string.format('%d', tonumber(h[3]) + 1)
  end
  return '1'
end

if c > 0 and not (h[2] and vcmp(ARGV[1], h[2]) <= 0) then
  if h[2] then
    redis.call('HSET', key, 'floor', ARGV[1], 'gen', nextgen(), 'stale', '1')
  else
    redis.call('HSET', key, 'floor', ARGV[1], 'gen', nextgen())
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
end

local res = 1
if c < 0 then
  res = 2
end
if c > 0 then
  -- Only reachable if the floor was lost (fill always raises it): restore
  -- it without touching the TTL of a value that is not older.
  redis.call('HSET', key, 'floor', ARGV[1])
  if redis.call('PTTL', key) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', key, ARGV[2])
  end
  res = 0
end

-- Not newer than the value: the version vouches for nothing, the time does.
local t = redis.call('TIME')
local cut = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + clock_bound_ms
if h[2] and h[7] ~= '1' and (tonumber(h[6]) or 0) < cut then
  redis.call('HSET', key, 'gen', nextgen(), 'stale', '1')
  if h[5] then
    redis.call('HDEL', key, 'rep')
  end
  res = 3
end
if h[4] then
  redis.call('HDEL', key, 'tok', 'texp')
  res = 3
end
return res
