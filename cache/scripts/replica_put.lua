-- REPLICA_PUT(copy; v, p, obs, eff, soft, hard, sum) -> 'ok' | 'expired' | 'sum'
-- Writes one copy of a primary entry with the primary's version,
-- observation and absolute deadlines (never new ones). The copy expires at
-- its soft deadline (never later than hard): readers go back to the primary
-- from then on, so nothing is kept that could be served. sum is the SHA1 of
-- the payload as the builder computed it; a payload that does not hash to it
-- is refused.
local now = servertime()
if now >= tonumber(ARGV[5]) or tonumber(ARGV[5]) > tonumber(ARGV[6]) then
  return 'expired'
end
if redis.sha1hex(ARGV[2]) ~= ARGV[7] then
  return 'sum'
end
redis.call('HSET', KEYS[1], 'v', ARGV[1], 'p', ARGV[2], 'obs', ARGV[3], 'eff', ARGV[4],
  'soft', ARGV[5], 'hard', ARGV[6], 'sum', ARGV[7])
redis.call('PEXPIREAT', KEYS[1], ARGV[5])
return 'ok'
