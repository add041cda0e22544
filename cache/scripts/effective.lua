-- Prepended to the replica scripts that read a primary entry: the same
-- watermark rule LOOKUP applies (docs/design.md, "Freshness watermark").
-- effective(h_obs, h_soft, h_hard, stale, nf, w, reset) returns the entry's
-- effective observation and its soft and hard deadlines moved by eff - obs.
local function effective(obs, soft, hard, stale, nf, w, reset)
  obs, soft, hard = tonumber(obs), tonumber(soft), tonumber(hard)
  local eff = obs
  if w > obs and obs >= reset and not stale and not nf then
    eff = w
  end
  return eff, soft + eff - obs, hard + eff - obs
end

local function servertime()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
