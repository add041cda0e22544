-- GCRA (generic cell rate algorithm): the source-read budget, shared by
-- every serve process: a bucket for the total (foreground + background, what
-- the source is promised), one per class inside it, and a fair share per
-- tenant inside the class. Keys hold theoretical arrival times (TAT) in
-- microseconds of Redis server time, so processes with skewed clocks share
-- one honest bucket. Every key carries the budget's one hash tag (one
-- Cluster slot), so one script spends the class and the total atomically.
-- KEYS[1]  the class's bucket
-- KEYS[2]  the tenant's bucket in this class
-- KEYS[3]  sorted set of the tenants that asked within the window (score: time)
-- KEYS[4]  the total's bucket
-- KEYS[5]  the tenant count the tenant's bucket was last spent at
-- ARGV[1]  emission interval of the class in microseconds (1e6 / rate)
-- ARGV[2]  burst tolerance of the class in microseconds
-- ARGV[3]  the tenant
-- ARGV[4]  active window in microseconds
-- ARGV[5]  cost: reads asked for at once (at most what a full bucket holds)
-- ARGV[6]  emission interval of the total in microseconds
-- ARGV[7]  burst tolerance of the total in microseconds
-- ARGV[8]  reserve: the part of the total's tolerance this class must leave
--          to the others (background work backs off first)
-- A tenant's share is the class rate divided by the tenants active in the
-- window: alone it may use the whole class; with others waiting it gets its
-- share and no more. Returns {1, 0} when the reads are admitted,
-- {0, retry_after_us} when not; a refusal spends nothing.
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local window = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
local total_iv = tonumber(ARGV[6])
local total_tol = tonumber(ARGV[7])
local reserve = tonumber(ARGV[8])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

redis.call('ZADD', KEYS[3], now, ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
redis.call('PEXPIRE', KEYS[3], math.floor(window / 1000) + 1000)
local n = redis.call('ZCARD', KEYS[3])

-- tat_of is the bucket's TAT; lost is what a missing key counts as.
local function tat_of(key, lost)
  local tat = tonumber(redis.call('GET', key))
  if not tat then
    return lost
  end
  if tat < now then
    return now
  end
  return tat
end

-- next returns the bucket's new TAT, or nil and how long to wait.
local function next(tat, iv, tol)
  local new_tat = tat + iv * cost
  local allow_at = new_tat - tol
  if allow_at > now then
    return nil, allow_at - now
  end
  return new_tat, 0
end

-- A tenant's bucket may vanish once it is full again (it expires): missing
-- is full. The class and total never expire, so a missing one was lost
-- with its node (a restart without persistence, a master replaced by an
-- empty one): it restarts empty but for one read, never with a fresh burst
-- on top of what was just spent. It is written at once, so that it fills
-- from then on even while every caller is refused.
local function lost(key, tol, iv)
  if redis.call('EXISTS', key) == 0 then
    redis.call('SET', key, string.format('%d', now + tol - iv))
  end
end
lost(KEYS[1], tolerance, interval)
lost(KEYS[4], total_tol, total_iv)
local tenant_iv = interval * n
-- What a tenant owes is reads, not time: when the count of active tenants
-- has changed since its bucket was spent, the time it owes is rescaled to
-- the new share, so a tenant that took the whole class alone owes it at its
-- share's pace once a second tenant arrives, and does not take the slots
-- the class frees meanwhile.
local function owed(key, was_key)
  local tat = tat_of(key, now)
  local was = tonumber(redis.call('GET', was_key))
  if was and was ~= n then
    tat = now + math.floor((tat - now) * n / was)
  end
  return tat
end
local tenant_tol = math.max(tenant_iv * cost, tolerance)
if n == 1 then
  -- Alone, a tenant leaves the class's last read to whichever tenant comes
  -- next, whose first read would otherwise meet a class this one keeps spent
  -- to its end (its bucket follows the class's, below; one admission of a
  -- full bucket's cost still fits).
  tenant_tol = math.max(tenant_iv * cost, tolerance - interval)
end
local tenant_tat, wait = next(owed(KEYS[2], KEYS[5]), tenant_iv, tenant_tol)
if not tenant_tat then
  return {0, wait}
end
local class_tat
class_tat, wait = next(tat_of(KEYS[1], now + tolerance - interval), interval, tolerance)
if not class_tat then
  return {0, wait}
end
local total_tat
total_tat, wait = next(tat_of(KEYS[4], now + total_tol - total_iv), total_iv, total_tol - reserve)
if not total_tat then
  return {0, wait}
end
-- Alone in the window a tenant's share is the whole class, so its bucket
-- takes the class's TAT: it must not carry credit the class does not have
-- (a class restarted empty, spent to its end by this tenant) into the moment
-- a second tenant arrives, or it would take every slot the class frees, first
-- come, for up to a burst while the newcomer is refused.
if n == 1 and class_tat > tenant_tat then
  tenant_tat = class_tat
end
redis.call('SET', KEYS[1], string.format('%d', class_tat))
redis.call('SET', KEYS[4], string.format('%d', total_tat))
local ttl = math.floor((tenant_tat - now) / 1000) + 1000
redis.call('SET', KEYS[2], string.format('%d', tenant_tat), 'PX', ttl)
redis.call('SET', KEYS[5], n, 'PX', ttl)
return {1, 0}
