-- REPLICA_READ(copy; version, sum) -> {'ok', v, p, obs, eff, soft, hard}
-- | {'missing'} | {'mismatch'} | {'expired'}
-- A copy is served only if it holds exactly the manifest's version and
-- checksum (REPLICA_PUT refused any payload that did not hash to it) and
-- this server's clock is before its soft deadline (which is never after the primary's hard
-- deadline at build time).
local h = redis.call('HMGET', KEYS[1], 'v', 'p', 'obs', 'eff', 'soft', 'hard', 'sum')
if not h[1] then
  return {'missing'}
end
if h[1] ~= ARGV[1] or h[7] ~= ARGV[2] then
  return {'mismatch'}
end
if servertime() >= tonumber(h[5]) then
  return {'expired'}
end
return {'ok', h[1], h[2], h[3], h[4], h[5], h[6]}
