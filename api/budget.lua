-- GCRA (generic cell rate algorithm): the source-read budget of one class,
-- shared by every serve process, with a fair share per tenant. Keys hold
-- theoretical arrival times (TAT) in microseconds of Redis server time, so
-- processes with skewed clocks share one honest bucket. All keys carry the
-- class's hash tag (one Cluster slot).
-- KEYS[1]  the class's bucket
-- KEYS[2]  the tenant's bucket in this class
-- KEYS[3]  sorted set of the tenants that asked within the window (score: time)
-- ARGV[1]  emission interval of the class in microseconds (1e6 / rate)
-- ARGV[2]  burst tolerance in microseconds
-- ARGV[3]  the tenant
-- ARGV[4]  active window in microseconds
-- A tenant's share is the class rate divided by the tenants active in the
-- window: alone it may use the whole class; with others waiting it gets its
-- share and no more. Returns {1, 0} when the read is admitted,
-- {0, retry_after_us} when not; a refusal spends nothing.
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local window = tonumber(ARGV[4])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

redis.call('ZADD', KEYS[3], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
redis.call('PEXPIRE', KEYS[3], math.floor(window / 1000) + 1000)
local n = redis.call('ZCARD', KEYS[3])

-- next returns the bucket's new TAT, or nil and how long to wait.
local function next(key, iv, tol)
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then
    tat = now
  end
  local new_tat = tat + iv
  local allow_at = new_tat - tol
  if allow_at > now then
    return nil, allow_at - now
  end
  return new_tat, 0
end

local tenant_iv = interval * n
local tenant_tat, wait = next(KEYS[2], tenant_iv, math.max(tenant_iv, tolerance))
if not tenant_tat then
  return {0, wait}
end
local class_tat
class_tat, wait = next(KEYS[1], interval, tolerance)
if not class_tat then
  return {0, wait}
end
-- A key can vanish once its bucket is full again: a fresh bucket is full.
redis.call('SET', KEYS[1], string.format('%d', class_tat), 'PX', math.floor((class_tat - now) / 1000) + 1000)
redis.call('SET', KEYS[2], string.format('%d', tenant_tat), 'PX', math.floor((tenant_tat - now) / 1000) + 1000)
return {1, 0}
