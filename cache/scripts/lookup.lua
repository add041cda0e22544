-- LOOKUP(key; min_version, watermark_ms, reset_at_ms, new_token, lease_ms, max_age_ms)
-- Returns {status, v, p, obs, eff, soft, hard, stale, issued, rep} (v as a
-- decimal string when an entry is returned, exact over the int64 range): soft
-- and hard are computed from the effective observation eff (docs/design.md),
-- issued is 1 when new_token became the key's lease, rep is the published
-- replica manifest on a hit when it is for this version and its deadlines are
-- within the entry's own ('' otherwise; cache/replica.go).
local key = KEYS[1]
local minv = ARGV[1]             -- versions stay strings: see vcmp
local w = tonumber(ARGV[2])      -- 0: watermark unknown
local reset = tonumber(ARGV[3])  -- 0: no gap known
local lease = tonumber(ARGV[5])
local maxage = tonumber(ARGV[6])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- A watermark ahead of this server's clock by more than the clock bound
-- vouches for nothing (a heartbeat from a host whose clock stepped ahead):
-- it counts as unknown.
if w > now + clock_bound_ms then
  w = 0
end

local h = redis.call('HMGET', key, 'v', 'p', 'obs', 'soft', 'hard', 'nf', 'floor', 'tok', 'texp', 'stale', 'rep')
local need = h[7] or '0'
if vcmp(minv, need) > 0 then
  need = minv
end

-- Tokens are bound to this server incarnation (run_id): a restart that
-- reloads data, or a key moved to another node, never honours an old token.
local function incarnation()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end
-- A lease from another incarnation cannot fill here, so nobody waits for it.
local leased = false
if h[8] and (tonumber(h[9]) or 0) > now then
  leased = string.sub(h[8], 34) == incarnation()
end

local function issue()
  redis.call('HSET', key, 'tok', ARGV[4] .. '@' .. incarnation(), 'texp', string.format('%d', now + lease))
  -- Long enough for the fill to land; never shortens a floor or a value.
  if redis.call('PTTL', key) < 2 * lease then -- -1: a new key without TTL
    redis.call('PEXPIRE', key, 2 * lease)
  end
  return 1
end

if h[1] then
  local v = h[1]
  local obs = tonumber(h[3])
  local stale = h[10] == '1'
  local nf = h[6] == '1'
  -- Watermark extension: every commit up to w is applied and this entry was
  -- not invalidated, so it is verified against the source as of w. Entries
  -- observed before the newest gap (reset_at) may have missed an event.
  local eff = obs
  if w > obs and obs >= reset and not stale and not nf then
    eff = w
  end
  local shift = eff - obs
  local soft = tonumber(h[4]) + shift
  local hard = tonumber(h[5]) + shift
  if now < hard then
    if nf then
      if not stale and vcmp(v, minv) >= 0 then
        return {'not_found', v, '', obs, eff, soft, hard, 0, 0, ''}
      end
    elseif vcmp(v, minv) >= 0 then
      if vcmp(v, need) >= 0 and not stale and now < soft then
        if shift > 0 then
          -- An extended entry may outlive the TTL set at fill time.
          local ttl = redis.call('PTTL', key)
          if ttl >= 0 and ttl < hard - now then
            redis.call('PEXPIRE', key, math.max(maxage, hard - now))
          end
        end
        local rep = ''
        if h[11] then
          local rv, rh, rs = string.match(h[11], '^(%S+) (%d+) (%d+) ')
          if rv == v and tonumber(rh) <= hard and tonumber(rs) <= soft and now < tonumber(rs) then
            rep = h[11]
          end
        end
        return {'hit', v, h[2], obs, eff, soft, hard, 0, 0, rep}
      end
      local issued = 0
      if not leased then
        issued = issue()
      end
      return {'stale', v, h[2], obs, eff, soft, hard, stale and 1 or 0, issued, ''}
    end
  end
end

if leased then
  return {'wait', 0, '', 0, 0, 0, 0, 0, 0, ''}
end
return {'miss', 0, '', 0, 0, 0, 0, 0, issue(), ''}
