package reader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Redis that restarts empty, comes back from an old snapshot, or fails
// over to a replica that had not caught up no longer holds the pool's
// presence as it was. The shares the processes on Redis reserve are read
// from it (budget.lua): a process cut off from Redis that is admitting its
// share locally would lose its reservation, and the others would admit the
// whole rate beside it. Each process knows the presence its last beat
// read, and its own registration in it: its entry gone or older than that
// registration says the server lost or rewound the pool's presence, and the
// process writes back what it last read (each member at the later of the
// two beats, counts and settings where missing) before it admits or beats
// again. The presence and budget scripts check the entry in the same
// script that reads the set, so no read is admitted between a rewind and
// its repair.

// errPresenceRewound: the server lost or rewound the pool's presence, and
// it was written back; the script that found it is run again.
var errPresenceRewound = errors.New("the cache tier lost or rewound the pool's presence")

// presenceMember is one member of the pool's presence as a beat read it.
type presenceMember struct {
	member   string
	beat     string // Redis ms, as the sorted set holds it
	count    string // the count its last beat saw ("": none)
	settings string // its budget settings ("": none)
}

// repairLua writes back members of KEYS[1] (with their counts in KEYS[2]
// and settings in KEYS[3]): ARGV[1] the presence TTL (ms), then per member
// its name, beat, count and settings. A beat is raised, never lowered (a
// member that beat since keeps its later one); a count or settings only
// set where missing.
const repairLua = `
local ttl = tonumber(ARGV[1])
for i = 2, #ARGV, 4 do
  local m, at = ARGV[i], tonumber(ARGV[i + 1])
  local cur = tonumber(redis.call('ZSCORE', KEYS[1], m))
  if not cur or cur < at then
    redis.call('ZADD', KEYS[1], at, m)
  end
  if ARGV[i + 2] ~= '' then
    redis.call('HSETNX', KEYS[2], m, ARGV[i + 2])
  end
  if ARGV[i + 3] ~= '' then
    redis.call('HSETNX', KEYS[3], m, ARGV[i + 3])
  end
end
for i = 1, 3 do
  redis.call('PEXPIRE', KEYS[i], 2 * ttl)
end
return 1`

var repairScript = redis.NewScript(repairLua)

// parseView reads the presence script's list of members: name, beat,
// count and settings of each.
func parseView(raw any) ([]presenceMember, error) {
	flat, ok := raw.([]any)
	if !ok || len(flat)%4 != 0 {
		return nil, fmt.Errorf("presence script's members: %v", raw)
	}
	view := make([]presenceMember, 0, len(flat)/4)
	for i := 0; i < len(flat); i += 4 {
		var f [4]string
		for j := range f {
			s, ok := flat[i+j].(string)
			if !ok {
				return nil, fmt.Errorf("presence script's members: %v", raw)
			}
			f[j] = s
		}
		if _, err := strconv.ParseFloat(f[1], 64); err != nil || f[0] == "" {
			return nil, fmt.Errorf("presence script's member %q at %q", f[0], f[1])
		}
		view = append(view, presenceMember{member: f[0], beat: f[1], count: f[2], settings: f[3]})
	}
	return view, nil
}

// repair writes back the presence this process's last beat read (it
// included this process at its registration). It returns errPresenceRewound
// when it did, so the caller runs its script again.
func (p *presence) repair(ctx context.Context) error {
	p.mu.Lock()
	view := p.state.view
	p.mu.Unlock()
	args := make([]any, 0, 1+4*len(view))
	args = append(args, p.ttl.Milliseconds())
	for _, m := range view {
		args = append(args, m.member, m.beat, m.count, m.settings)
	}
	if err := repairScript.Run(ctx, p.rdb, []string{p.procsKey, p.countKey, p.settingsKey}, args...).Err(); err != nil {
		return fmt.Errorf("reader: writing back the pool's presence in %s: %w", p.procsKey, err)
	}
	if p.rewinds != nil {
		p.rewinds.Inc()
	}
	if p.lastRewindWarn.allow(time.Now()) {
		p.log.Warn("the cache tier lost or rewound the pool's presence (restarted empty, restored from an old snapshot, failed over to a lagging replica); wrote back the members this process last saw, so the shares of those cut off from Redis stay reserved",
			"members", len(view))
	}
	return errPresenceRewound
}
