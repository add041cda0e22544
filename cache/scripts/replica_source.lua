-- REPLICA_SOURCE(primary; watermark_ms, reset_at_ms, lock_ms, min_left_ms)
-- The builder's read of a hot primary entry, without a lease: it never
-- takes part in filling. Replies
--   {'current', rep}  the published set is for the entry's version and stays
--                     servable for at least min_left_ms: nothing to do;
--   {'busy'}          another builder holds the build lock;
--   {'none'}          no fresh value to copy (absent, not-found, stale,
--                     below the floor or soft-expired);
--   {'ok', v, p, obs, eff, soft, hard}  build a set from this snapshot (the
--                     caller now holds the build lock for lock_ms).
local key = KEYS[1]
local w, reset = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = servertime()
local h = redis.call('HMGET', key, 'v', 'p', 'obs', 'soft', 'hard', 'nf', 'floor', 'stale', 'rep', 'rlk')
if not h[1] or h[6] == '1' or h[8] == '1' or vcmp(h[1], h[7] or '0') < 0 then
  return {'none'}
end
local eff, soft, hard = effective(h[3], h[4], h[5], false, false, w, reset)
if now >= soft then
  return {'none'}
end
if h[9] then
  local rv, rs = string.match(h[9], '^(%S+) %d+ (%d+) ')
  if rv == h[1] and tonumber(rs) - now >= tonumber(ARGV[4]) then
    return {'current', h[9]}
  end
end
if (tonumber(h[10]) or 0) > now then
  return {'busy'}
end
redis.call('HSET', key, 'rlk', string.format('%d', now + tonumber(ARGV[3])))
return {'ok', h[1], h[2], h[3], string.format('%d', eff), string.format('%d', soft), string.format('%d', hard)}
