-- RELEASE(key; token)
-- Gives a fill lease back without filling: deletes tok/texp only when they
-- are the caller's token of this server incarnation (as FILL checks it), so
-- a release never takes another reader's newer lease. Returns 1 when the
-- lease was released, 0 when it was not the caller's (expired, replaced or
-- already used): either way nobody waits for it any more.
local key = KEYS[1]
local tok = redis.call('HGET', key, 'tok')
if not tok then
  return 0
end
local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
if tok ~= ARGV[1] .. '@' .. id then
  return 0
end
redis.call('HDEL', key, 'tok', 'texp')
-- A key that held nothing but the lease (a miss) goes: it was only kept
-- alive for the fill.
if redis.call('HLEN', key) == 0 then
  redis.call('DEL', key)
end
return 1
