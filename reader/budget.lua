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
-- KEYS[6]  the pool's readers: sorted set, member -> last beat (ms)
-- KEYS[7]  hash, reader -> the count of readers its last beat saw
-- KEYS[8]  the tenant's rate of reads admitted in every class: "reads/s,at"
--          (a moving average over the window, at: its time)
-- KEYS[9]  sorted set of the tenants that asked any class within the window
-- ARGV[1]  emission interval of the class in microseconds (1e6 / rate)
-- ARGV[2]  burst tolerance of the class in microseconds
-- ARGV[3]  the tenant
-- ARGV[4]  active window in microseconds
-- ARGV[5]  cost: reads asked for at once (at most what a full bucket holds)
-- ARGV[6]  emission interval of the total in microseconds
-- ARGV[7]  burst tolerance of the total in microseconds
-- ARGV[8]  reserve: the part of the total's tolerance this class must leave
--          to the others (background work backs off first)
-- ARGV[9]  ms after which a reader's beat is late (it may admit locally)
-- ARGV[10] ms after which a reader is dropped (it no longer admits locally)
-- ARGV[11] the calling reader (on Redis, whatever its beat says)
-- ARGV[12] 1 when ARGV[3] is a tenant (the auditor's batched reads belong
--          to none: they do not share the total, KEYS[8-9] are not used)
-- ARGV[13] the calling reader's last registration in KEYS[6] (Redis ms; 0:
--          none yet): its entry gone or older says the server lost or
--          rewound the pool's presence; answers {2, 0} and spends nothing
--          (the reader writes it back and asks again, rewind.go)
-- A tenant's share is the class rate divided by the tenants active in the
-- window: alone it may use the whole class; with others waiting it gets its
-- share and no more (read-your-writes has its own ceiling inside the total,
-- at most the foreground rate, so a tenant's flood of them leaves the
-- foreground's room).
-- Where the total is spent, across classes, a tenant reading faster than
-- its share of it (the total divided by the tenants that asked any class
-- within the window; its rate a moving average over the window) may spend
-- the total's burst only down to its share of that burst: the rest is left
-- to the tenants within their share. So a tenant flooding several classes
-- at once takes what the others leave and no more, while a tenant within
-- its share (a newcomer has read nothing yet) is refused only when the
-- total itself is spent, and a lone tenant has the whole total. A rate,
-- not a bucket: a bucket of the share carries no debt for a lone tenant
-- that spent the total at its pace (its share was all of it), and one that
-- follows the total's debt takes on debt the tenant never spent (a total
-- restarted with one read), which a second tenant's arrival doubled.
-- A reader of the pool whose beat is late may be admitting locally (it
-- cannot reach Redis) at the share its last beat saw (rate / count): the
-- rates here are what is left once those shares are reserved. Returns {1, 0} when the reads are admitted,
-- {0, retry_after_us} when not; a refusal spends nothing.
local interval = tonumber(ARGV[1])
local tolerance = tonumber(ARGV[2])
local window = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
local total_iv = tonumber(ARGV[6])
local total_tol = tonumber(ARGV[7])
local reserve = tonumber(ARGV[8])
local late_ms = tonumber(ARGV[9])
local ttl_ms = tonumber(ARGV[10])
local registered = tonumber(ARGV[13])
if registered > 0 then
  local own = tonumber(redis.call('ZSCORE', KEYS[6], ARGV[11]))
  if not own or own < registered then
    return {2, 0}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- Reserve the shares of the readers that may be admitting locally: beat
-- more than late_ms ago, not yet dropped (a reader stops admitting locally
-- before ttl_ms after its last beat, budget.go).
local now_ms = math.floor(now / 1000)
local late = redis.call('ZRANGEBYSCORE', KEYS[6], '(' .. (now_ms - ttl_ms), '(' .. (now_ms - late_ms))
if #late > 0 then
  local counts = redis.call('HMGET', KEYS[7], unpack(late))
  local reserved = 0
  for i = 1, #late do
    if late[i] ~= ARGV[11] then
      local c = tonumber(counts[i])
      if not c or c < 1 then
        c = 1 -- its share is not known: all of it
      end
      reserved = reserved + 1 / c
    end
  end
  local left = 1 - reserved
  if left < 0.001 then
    return {0, late_ms * 1000}
  end
  if left < 1 then
    interval = math.ceil(interval / left)
    total_iv = math.ceil(total_iv / left)
    tolerance = math.max(tolerance, interval)
    total_tol = math.max(total_tol, total_iv)
  end
end

-- active registers the tenant in a tenants set and counts the set.
local function active(key)
  redis.call('ZADD', key, now, ARGV[3])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  redis.call('PEXPIRE', key, math.floor(window / 1000) + 1000)
  return redis.call('ZCARD', key)
end
local n = active(KEYS[3])
local nt = 0
if ARGV[12] == '1' then
  nt = active(KEYS[9])
end

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
-- What a tenant owes is reads, not time: when the count of active tenants
-- has changed since its bucket was spent, the time it owes is rescaled to
-- the new share, so a tenant that took the whole class alone owes it at its
-- share's pace once a second tenant arrives, and does not take the slots
-- the class frees meanwhile.
local function owed(key, was_key, count)
  local tat = tat_of(key, now)
  local was = tonumber(redis.call('GET', was_key))
  if was and was ~= count then
    tat = now + math.floor((tat - now) * count / was)
  end
  return tat
end
-- share spends the tenant's share (of a bucket of iv and tol shared by
-- count tenants): its new TAT, or nil and how long to wait.
local function share(key, was_key, count, iv, tol)
  local tenant_iv = iv * count
  local tenant_tol = math.max(tenant_iv * cost, tol)
  if count == 1 then
    -- Alone, a tenant leaves the bucket's last read to whichever tenant
    -- comes next, whose first read would otherwise meet a bucket this one
    -- keeps spent to its end (its bucket follows the shared one, below; one
    -- admission of a full bucket's cost still fits).
    tenant_tol = math.max(tenant_iv * cost, tol - iv)
  end
  return next(owed(key, was_key, count), tenant_iv, tenant_tol)
end
local tenant_tat, wait = share(KEYS[2], KEYS[5], n, interval, tolerance)
if not tenant_tat then
  return {0, wait}
end
local class_tat
class_tat, wait = next(tat_of(KEYS[1], now + tolerance - interval), interval, tolerance)
if not class_tat then
  return {0, wait}
end
-- The tenant's rate across classes, decayed to now, and whether it is past
-- its share of the total.
local past = false
local rate_now = 0
if nt > 0 then
  local got = redis.call('GET', KEYS[8])
  if got then
    local r, at = string.match(got, '^([^,]+),([^,]+)$')
    r, at = tonumber(r), tonumber(at)
    if r and at then
      rate_now = r * math.exp(-math.max(0, now - at) / window)
    end
  end
  past = nt > 1 and rate_now > 1000000 / total_iv / nt
end
local total_room = total_tol - reserve
if past then
  total_room = math.min(total_room, math.max(math.floor(total_tol / nt), total_iv * cost))
end
local total_tat
total_tat, wait = next(tat_of(KEYS[4], now + total_tol - total_iv), total_iv, total_room)
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
local function spend(key, was_key, tat, count)
  local ttl = math.floor((tat - now) / 1000) + 1000
  redis.call('SET', key, string.format('%d', tat), 'PX', ttl)
  redis.call('SET', was_key, count, 'PX', ttl)
end
spend(KEYS[2], KEYS[5], tenant_tat, n)
if nt > 0 then
  -- cost reads at once add cost / window (in seconds) to the average.
  rate_now = rate_now + cost * 1000000 / window
  redis.call('SET', KEYS[8], string.format('%.6f,%d', rate_now, now), 'PX', math.floor(window / 1000) * 10)
end
return {1, 0}
