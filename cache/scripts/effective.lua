-- Prepended to the replica scripts that read a primary entry: the same
-- watermark rule LOOKUP applies (docs/design.md, "Freshness watermark").
local function servertime()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- effective(h_obs, h_soft, h_hard, stale, nf, w, reset) returns the entry's
-- effective observation and its soft and hard deadlines moved by eff - obs.
-- A w ahead of this server's clock by more than the clock bound is unknown.
local function effective(obs, soft, hard, stale, nf, w, reset)
  obs, soft, hard = tonumber(obs), tonumber(soft), tonumber(hard)
  if w > servertime() + clock_bound_ms then
    w = 0
  end
  local eff = obs
  if w > obs and obs >= reset and not stale and not nf then
    eff = w
  end
  return eff, soft + eff - obs, hard + eff - obs
end
