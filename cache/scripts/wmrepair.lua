-- WMREPAIR(hash; field...) -> number of fields deleted. Deletes each named
-- p<N> still ahead of this server's clock by more than clock_bound_ms: the
-- partition's watermark becomes unknown until its next resolved marker,
-- rather than a future value that would vouch for entries once real time
-- catches up with it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
for _, f in ipairs(ARGV) do
  local v = tonumber(redis.call('HGET', KEYS[1], f))
  if v and v > now + clock_bound_ms then
    redis.call('HDEL', KEYS[1], f)
    n = n + 1
  end
end
return n
