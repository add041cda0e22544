-- REPLICA_SWITCH(primary; version, manifest, watermark_ms, reset_at_ms)
-- -> 'ok' | 'changed' | 'expired'
-- Publishes a verified copy set: the manifest replaces the previous one
-- only while the primary still holds exactly that version, not invalidated,
-- at or above its floor, and the set's deadlines are not later than the
-- primary's own as computed now. Otherwise nothing changes ('changed': the
-- value moved on; 'expired': the set's deadlines are no longer covered).
-- The manifest is '<version> <hard> <soft> <rest>'; see cache/replica.go.
local key = KEYS[1]
local w, reset = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = servertime()
local h = redis.call('HMGET', key, 'v', 'obs', 'soft', 'hard', 'nf', 'floor', 'stale')
if not h[1] or h[1] ~= ARGV[1] or h[5] == '1' or h[7] == '1' or vcmp(h[1], h[6] or '0') < 0 then
  return 'changed'
end
local _, soft, hard = effective(h[2], h[3], h[4], false, false, w, reset)
local mh, ms = string.match(ARGV[2], '^%S+ (%d+) (%d+) ')
if not mh or tonumber(mh) > hard or tonumber(ms) > soft or now >= tonumber(ms) then
  return 'expired'
end
redis.call('HSET', key, 'rep', ARGV[2])
redis.call('HDEL', key, 'rlk')
return 'ok'
