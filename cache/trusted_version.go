//go:build tidemark_trust_version

package cache

// Built only with the tag tidemark_trust_version, for the chaos harness's
// test of the fault unbumped-write (lab/chaos): INVALIDATE as it was before
// a change was an invalidation whatever its version says: an event not
// above the floor changes nothing, so a write that kept the version leaves
// the value read before it vouched for by the watermark.
func init() { invalidateLua = trustedVersionLua }

const trustedVersionLua = `local key = KEYS[1]
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
if h[5] then
  redis.call('HDEL', key, 'rep')
end
redis.call('PEXPIRE', key, ARGV[2])
return 0`
