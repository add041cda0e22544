-- FILL(key; token, version, payload, obs_ms, soft_ms, hard_ms, ttl_ms, nf,
--       clock_bound_ms, hard_lifetime_ms, promise_ms)
-- Returns 'ok' or the rejection reason: 'token', 'version', 'expired',
-- 'clock' (obs is ahead of this server's clock by more than clock_bound_ms:
-- the filler's clock runs fast) or 'lifetime' (hard is later than obs plus
-- hard_lifetime_ms, itself at most promise_ms: the promise, so no
-- configuration can cache a value past it).
-- A rejection changes nothing. A fill retires the replica manifest (it
-- described the previous value). nf='1' installs a not-found entry whose
-- version is the key's floor (the read saw every version up to it).
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local h = redis.call('HMGET', key, 'tok', 'texp', 'floor', 'v')
-- Only the key's current, unexpired token of this server incarnation fills.
if not h[1] or (tonumber(h[2]) or 0) <= now then
  return 'token'
end
local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if h[1] ~= ARGV[1] .. '@' .. id then
  return 'token'
end

local nf = ARGV[8] == '1'
local ver = ARGV[2]
if nf then
  ver = h[3] or '0'
elseif vcmp(ver, h[3] or '0') < 0 or (h[4] and vcmp(ver, h[4]) < 0) then
  return 'version'
end
if now >= tonumber(ARGV[6]) then
  return 'expired'
end
local obs = tonumber(ARGV[4])
if obs > now + tonumber(ARGV[9]) then
  return 'clock'
end
if tonumber(ARGV[6]) > obs + math.min(tonumber(ARGV[10]), tonumber(ARGV[11])) then
  return 'lifetime'
end

-- Filling raises the floor: a later older fill can never win.
redis.call('HSET', key, 'v', ver, 'p', ARGV[3], 'obs', ARGV[4], 'soft', ARGV[5], 'hard', ARGV[6], 'floor', ver)
if nf then
  redis.call('HSET', key, 'nf', '1')
  redis.call('HDEL', key, 'tok', 'texp', 'stale', 'rep')
else
  redis.call('HDEL', key, 'tok', 'texp', 'stale', 'nf', 'rep')
end
local ttl = redis.call('PTTL', key)
if ttl == -1 or ttl < tonumber(ARGV[7]) then
  redis.call('PEXPIRE', key, ARGV[7])
end
return 'ok'
