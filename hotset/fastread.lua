-- FASTREAD(fast) -> {key1, rate1, key2, rate2, ...}, one pair per live entry
-- (a key published by several processes appears once per process; the
-- caller sums). Entries past their expiry are deleted: their process
-- stopped publishing.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local all = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #all, 2 do
  local rate, exp = string.match(all[i + 1], '^(%S+) (%d+)$')
  local key = string.match(all[i], '^%S+ (.+)$')
  if not rate or not key or tonumber(exp) <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = key
    out[#out + 1] = rate
  end
end
return out
