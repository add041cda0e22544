-- Prepended to the scripts that extend an entry by the watermark, or bind a
-- lease to this server. incarnation() is this server's run_id, read once
-- per run. watermark_here(w, seen) is w when the poll that read w saw this
-- server (seen: the run_ids of every master, read before the watermark,
-- comma-separated), 0 otherwise: a watermark read before this server
-- restarted, was restored from a snapshot or took over from its master
-- vouches for invalidations it may not hold.
local run_id
local function incarnation()
  if not run_id then
    run_id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
  end
  return run_id
end

local function watermark_here(w, seen)
  if w == 0 or string.find(seen, incarnation(), 1, true) then
    return w
  end
  return 0
end
