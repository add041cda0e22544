-- WMIDENTITY(hash; server, generation) -> the identity now stored.
-- Binds the watermark hash to the cache tier's incarnation: the identity
-- field holds "<server>#<generation>". A stored identity of the same server
-- is kept (another applier bound it first: every applier adopts it); one of
-- another server, or none, is replaced by "<server>#<generation>". The
-- watermark's writers pass the identity they adopted, and WATERMARK refuses
-- a write unless the hash holds exactly that, so a hash lost and recreated
-- (a flush, an eviction, a field written by another call) or re-bound after
-- a reset is noticed by every applier on its next write.
local cur = redis.call('HGET', KEYS[1], 'identity')
if cur then
  local server = cur
  local i = string.find(cur, '#', 1, true)
  if i then
    server = string.sub(cur, 1, i - 1)
  end
  if server == ARGV[1] then
    return cur
  end
end
local id = ARGV[1] .. '#' .. ARGV[2]
redis.call('HSET', KEYS[1], 'identity', id)
return id
