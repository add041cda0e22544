-- WATERMARK(hash; field, value_ms[, identity[, source]]) -> {result, now_ms}
-- Raises a partition watermark p<N> (docs/design.md, "Freshness watermark").
-- result: 1 raised, 0 kept (already at least as high), -2 refused: the
-- identity differs (below), -1 refused: the value
-- is ahead of this server's clock by more than clock_bound_ms (a heartbeat
-- from a host whose clock stepped, or a message nobody should have sent);
-- refusals are counted in the hash (future_refused, future_refused_at,
-- future_refused_field, future_refused_value) for `tidemark status`. A
-- stored value itself ahead of the clock is replaced, never kept. With
-- identity (the one WMIDENTITY bound and the writer adopted), the write is
-- refused with -2 and nothing written unless the hash holds exactly that
-- identity: a lost hash is never silently recreated by a watermark. Nor
-- unless this server is one the identity names ("<run_id>/<master_replid>"
-- among its comma-separated servers): a replica promoted in its server's
-- place, or a snapshot loaded into another, brings the hash with the
-- identity but not the floors raised after its copy, and a watermark
-- written there would extend entries past them until the applier's next
-- identity check. With source (the marker's: server, database, table;
-- '' none), the partition's s<N> field records it: a marker of another
-- source than the one s<N> names replaces the watermark, lower or not (it
-- vouches for its own stream only), and a serve process trusts a
-- watermark only of its own source (cache.Client.SetSource).
if ARGV[3] and ARGV[3] ~= '' then
  if redis.call('HGET', KEYS[1], 'identity') ~= ARGV[3] then
    return {-2, 0}
  end
  local run = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  local repl = string.match(redis.call('INFO', 'replication'), 'master_replid:(%x+)')
  local servers = ',' .. (string.match(ARGV[3], '^([^#]*)') or '') .. ','
  if not run or not repl or not string.find(servers, ',' .. run .. '/' .. repl .. ',', 1, true) then
    return {-2, 0}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = tonumber(ARGV[2])
if v == nil then
  return redis.error_reply('ERR watermark value is not a number')
end
if v > now + clock_bound_ms then
  redis.call('HINCRBY', KEYS[1], 'future_refused', 1)
  redis.call('HSET', KEYS[1], 'future_refused_at', string.format('%d', now),
    'future_refused_field', ARGV[1], 'future_refused_value', ARGV[2])
  return {-1, now}
end
local src = ARGV[4]
if src and src ~= '' then
  local sf = 's' .. string.sub(ARGV[1], 2)
  if redis.call('HGET', KEYS[1], sf) ~= src then
    redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], sf, src)
    return {1, now}
  end
end
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local raised = 0
if cur == nil or v > cur or cur > now + clock_bound_ms then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  raised = 1
end
return {raised, now}
