-- WMREAD(hash) -> {now_ms, field, value, ...}: the watermark hash and this
-- server's clock in one atomic read, so a reader can tell a p<N> ahead of
-- the cache tier's clock (which counts as unknown) without trusting its own.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = redis.call('HGETALL', KEYS[1])
table.insert(out, 1, string.format('%d', now))
return out
