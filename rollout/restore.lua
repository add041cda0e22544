-- RESTORE(modes, gen, lost; generation, time, tenant, json, ...): puts the
-- durable record's settings back as the cache tier's copy when the copy is
-- lost (no marker) or at an older generation, and leaves a note of the loss
-- ("<time> <generation restored> <generation found>") for `tidemark rollout
-- status`. Returns the copy's generation found (0:
-- lost), or -1 when the copy was already at or past the record.
local cur = 0
if redis.call('HEXISTS', KEYS[1], '_written') == 1 then
  cur = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
if cur >= tonumber(ARGV[1]) then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '_written', '1')
for i = 3, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], ARGV[2] .. ' ' .. ARGV[1] .. ' ' .. cur)
return cur
