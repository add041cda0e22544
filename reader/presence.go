package reader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/rollout"
)

// presence registers this serve process among its source pool's readers
// every second, in the budget's own Cluster slot, with the count of
// readers it saw (its share while Redis cannot be asked is the rate divided
// by that count). The budget script reads the same set: a member whose
// beat is late (presenceLate) may be admitting locally at its share, so the
// processes still on Redis reserve that share (budget.lua), and a process
// admits locally only between presenceLate after its last beat (when the
// others reserve its share) and presenceTTL after it (when they drop it
// and stop reserving), holding before and after.
//
// It also registers in the pool's serve set and stamps the namespace the
// process fills, which `tidemark status` reads to show a namespace upgrade's
// old namespace draining. That beat has a deadline of its own: a slow
// registration never costs status its count.
type presence struct {
	rdb      redis.Scripter
	script   *redis.Script
	procsKey string // sorted set: member -> last beat (Redis ms)
	countKey string // hash: member -> the count its last beat saw
	// settingsKey: hash, member -> its budget's settings (settings, as
	// budgetSettings.String); every beat hands the live members' to agree.
	settingsKey string
	settings    string
	agree       func(pool []string)
	// idKey holds the id of the pool's buckets in this Redis (created by
	// the first beat that finds none): processes of one pool on two
	// Redis deployments, or after a Redis lost its data, admit from
	// different buckets, and the source's registration tells them apart
	// (sourcereaders.go). Every beat hands it to buckets.
	idKey   string
	buckets func(id string)
	key     string // the pool's serve set (status)
	pool    string
	ns      string
	member  string // this process in procsKey: its instance, whatever namespace it fills
	id      string // this process in the serve set: "<namespace>/<instance>"
	ttl     time.Duration
	late    time.Duration
	every   time.Duration
	log     *slog.Logger
	errs    prometheus.Counter // nil in unit tests of the fallback
	rewinds prometheus.Counter // repairs of a lost or rewound presence (rewind.go); nil in unit tests
	base    time.Time          // local monotonic origin of the Redis clock estimate

	mu    sync.Mutex
	state presenceState

	lastWarn, lastRewindWarn warnEvery
}

// presenceState is what the last successful beat established.
type presenceState struct {
	n int64 // live readers of the pool, this one included
	// sent is when the last successful beat was sent (local clock), less
	// what Redis moved its registration back by (a beat that arrived after
	// its deadline registers at the deadline): the others drop this process
	// presenceTTL after the registration, so not before sent + presenceTTL.
	sent time.Time
	// attempted is the deadline of the last beat sent, answered or not: a
	// beat whose answer was lost may still have registered this process,
	// but never later than its deadline.
	attempted time.Time
	failing   bool // the last beat failed: probe before registering again
	// offset estimates Redis's clock minus base (ms): the highest of the
	// samples, each taken when an answer arrived and so low by the
	// answer's way back, less 1 ms per second since (drift). It is never
	// above the true offset, so a deadline sent in Redis time is never
	// later than the local one it stands for.
	offset, offsetAt int64 // offsetAt: base ms of the estimate; offsetAt 0: none yet
	joined           int64 // Redis ms of this process's (re)registration
	// registered is the Redis ms the last successful beat registered this
	// process at, and view the presence that beat read (this process
	// included): the entry found older says the server lost or rewound
	// the presence, and view is written back (rewind.go).
	registered int64
	view       []presenceMember
	// counted: every other live reader has beat since this one registered,
	// so each one's count includes it and no share this one takes is
	// already another's.
	counted bool
}

// presenceLua registers ARGV[1] in KEYS[1] with the count it sees in
// KEYS[2] and its budget settings ARGV[4] in KEYS[3], dropping members not
// seen for ARGV[2] ms, and reads the buckets' id KEYS[4] (setting ARGV[5]
// when there is none). It registers at Redis's
// time, or at ARGV[3] (Redis ms; 0: none) when it runs later than that: a
// beat held up on the way never registers the process later than the
// process itself assumes (it starts admitting locally from there). Returns
// the count, the time, whether the member was new (a first beat, or its
// entry was lost with the server), the oldest beat of the others (-1: none)
// and how far the registration was moved back (ms), the live members'
// budget settings, the buckets' id, and the members (name, beat, count,
// settings of each). ARGV[6] is this member's last registration (Redis ms,
// 0: none): its entry gone or older answers {'rewound'} and changes
// nothing (rewind.go).
const presenceLua = `
local registered = tonumber(ARGV[6])
if registered > 0 then
  local own = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
  if not own or own < registered then
    return {'rewound'}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local at = now
local deadline = tonumber(ARGV[3])
if deadline > 0 and deadline < now then
  at = deadline
end
local ttl = tonumber(ARGV[2])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
  redis.call('HDEL', KEYS[3], m)
end
local added = redis.call('ZADD', KEYS[1], at, ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], n)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
redis.call('PEXPIRE', KEYS[3], 2 * ttl)
-- The oldest beat of the others: ZRANGE's first two members (with
-- scores), one of which may be this one.
local oldest = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
if first[1] and first[1] ~= ARGV[1] then
  oldest = tonumber(first[2])
elseif first[3] then
  oldest = tonumber(first[4])
end
local id = redis.call('GET', KEYS[4])
if not id then
  id = ARGV[5]
  redis.call('SET', KEYS[4], id)
end
local members = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local view = {}
for i = 1, #members, 2 do
  local m = members[i]
  view[#view + 1] = m
  view[#view + 1] = members[i + 1]
  view[#view + 1] = redis.call('HGET', KEYS[2], m) or ''
  view[#view + 1] = redis.call('HGET', KEYS[3], m) or ''
end
return {n, now, added, oldest, now - at, redis.call('HVALS', KEYS[3]), id, view}`

// serveLua: register ARGV[1] in the pool's serve set (status) at Redis's
// time, drop members not seen for ARGV[2] ms.
const serveLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
return redis.call('ZCARD', KEYS[1])`

var serveScript = redis.NewScript(serveLua)

// The presence thresholds, all in beats, so that a beat slowed or skipped
// by a loaded host (a second or two without CPU) neither makes the others
// reserve a live process's share nor fails the beat.
const (
	presenceEvery = time.Second
	// presenceBeatTimeout bounds a beat, and is its deadline in Redis: one
	// that arrives later registers at the deadline.
	presenceBeatTimeout = presenceEvery
	// presenceLate: a member not seen for this long may be admitting
	// locally; the others reserve its share. Three beats: a live process
	// on a loaded host beats within it.
	presenceLate = 3 * presenceEvery
	// presenceTTL: a member not seen for this long is dropped (and no
	// longer admits locally). A process cut off from Redis admits locally
	// from presenceLate after the deadline of its last beat attempt to
	// presenceTTL after its last beat (less localMargin): about 3 s per
	// outage, then it holds. A process killed outright has its share
	// reserved by the others from presenceLate to presenceTTL after its
	// last beat.
	presenceTTL = 8 * presenceEvery
	// localMargin ends local admission this much before the others drop
	// the member (and stop reserving its share).
	localMargin = 250 * time.Millisecond
)

// budgetTag is the hash tag of every key of a pool's budget: one Cluster
// slot, so one script reads the members and spends the buckets.
func budgetTag(pool string) string { return "{" + pool + ":v1:_budget}" }

func newPresence(pool, namespace, instance string, rdb redis.Scripter, log *slog.Logger) *presence {
	tag := budgetTag(pool)
	p := &presence{rdb: rdb, script: redis.NewScript(presenceLua), procsKey: tag + ":procs", countKey: tag + ":procs:n", settingsKey: tag + ":procs:budget", idKey: tag + ":id",
		key: rollout.ServeKey(pool), pool: pool, ns: namespace,
		ttl: presenceTTL, late: presenceLate, every: presenceEvery, log: log, base: time.Now(),
		state: presenceState{n: 1}}
	p.name(instance)
	return p
}

// name sets this process's instance (empty: a random one, so every start
// is a newcomer).
func (p *presence) name(instance string) {
	if instance == "" {
		instance = randomID()
	}
	p.member, p.id = instance, rollout.ServeMember(p.ns, instance)
}

func (p *presence) snapshot() presenceState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// count is the number of live serve processes, this one included.
func (p *presence) count() int64 { return max(1, p.snapshot().n) }

// share is the number of live serve processes to divide a rate by, and
// whether it is known: this process has been counted by every other live
// one (each has beat since it registered).
func (p *presence) share(time.Time) (int64, bool) {
	s := p.snapshot()
	return max(1, s.n), s.counted
}

// localWindow says whether this process may admit locally at now (Redis
// cannot be asked): only from presenceLate after the deadline of its last
// beat sent (by then every process on Redis reserves its share) until
// presenceTTL after its last successful beat was sent (less a margin: then
// the others drop it and stop reserving). Otherwise it holds; retry says
// when to ask again.
func (p *presence) localWindow(now time.Time) (ok bool, retry time.Duration, why string) {
	s := p.snapshot()
	if !s.counted || s.sent.IsZero() {
		return false, time.Second, "not counted by every live serve process"
	}
	if from := s.attempted.Add(p.late); now.Before(from) {
		return false, from.Sub(now), "the others do not reserve this process's share yet"
	}
	if now.After(s.sent.Add(p.ttl - localMargin)) {
		return false, time.Second, "admitting locally longer than the presence TTL"
	}
	return true, 0, ""
}

// reachable reports whether this process's last beat landed and is recent
// (not yet late): Redis is there, if slow.
func (p *presence) reachable(now time.Time) bool {
	s := p.snapshot()
	return !s.failing && !s.sent.IsZero() && now.Sub(s.sent) < p.late
}

// ms is t on the local clock of the Redis clock estimate.
func (p *presence) ms(t time.Time) int64 { return t.Sub(p.base).Milliseconds() }

// beat registers this process in the budget's set and refreshes its count;
// on error the last state stays (and ages: localWindow ends).
func (p *presence) beat(ctx context.Context) error {
	p.mu.Lock()
	last := p.state
	p.mu.Unlock()
	if last.failing {
		// After a failed beat, a probe first: while Redis cannot be reached
		// no registration is sent, so the deadline of the last one sent
		// (from which this process may admit locally) stays where it is.
		pctx, cancel := context.WithTimeout(ctx, presenceBeatTimeout)
		err := p.rdb.Eval(pctx, "return 1", nil).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("reader: presence probe: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, presenceBeatTimeout)
	defer cancel()
	sent := time.Now()
	var deadline int64 // Redis ms; none before the clock is estimated (first beat)
	if last.offsetAt != 0 {
		deadline = p.ms(sent.Add(presenceBeatTimeout)) + last.offset
	}
	p.mu.Lock()
	p.state.attempted = sent.Add(presenceBeatTimeout)
	p.mu.Unlock()
	keys := []string{p.procsKey, p.countKey, p.settingsKey, p.idKey}
	raw, err := p.script.Run(ctx, p.rdb, keys, p.member, p.ttl.Milliseconds(), deadline, p.settings, randomID(), last.registered).Slice()
	if err == nil && isRewound(raw) {
		if err = p.repair(ctx); errors.Is(err, errPresenceRewound) {
			raw, err = p.script.Run(ctx, p.rdb, keys, p.member, p.ttl.Milliseconds(), deadline, p.settings, randomID(), last.registered).Slice()
		}
	}
	answered := p.ms(time.Now())
	var res []int64
	var pool []string
	var id string
	var view []presenceMember
	if err == nil {
		res, pool, id, view, err = parseBeat(raw)
	}
	if err != nil {
		p.mu.Lock()
		p.state.failing = true
		p.mu.Unlock()
		return fmt.Errorf("reader: presence in %s: %w", p.procsKey, err)
	}
	if p.agree != nil {
		p.agree(pool)
	}
	if p.buckets != nil {
		p.buckets(id)
	}
	n, now, added, oldest, moved := res[0], res[1], res[2], res[3], res[4]
	p.mu.Lock()
	defer p.mu.Unlock()
	s := &p.state
	s.failing = false
	if est := s.offset - (answered-s.offsetAt)/1000; s.offsetAt == 0 || now-answered >= est {
		s.offset = now - answered
	} else {
		s.offset = est
	}
	s.offsetAt = max(1, answered)
	if added == 1 || s.joined == 0 {
		// A first beat, or the entry was lost (Redis restarted empty): the
		// others' counts may not include this process until they beat again.
		s.joined, s.counted = now-moved, false
	}
	if !s.counted && (oldest == -1 || oldest > s.joined) {
		s.counted = true
	}
	s.n, s.sent = n, sent.Add(-time.Duration(moved)*time.Millisecond)
	s.registered, s.view = now-moved, view
	return nil
}

// lastRegistered is the Redis ms of this process's last registration (0:
// none yet).
func (p *presence) lastRegistered() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.registered
}

// isRewound says whether a script answered that the server lost or rewound
// the pool's presence.
func isRewound(raw []any) bool {
	return len(raw) == 1 && raw[0] == "rewound"
}

// parseBeat reads presenceLua's answer: five integers, the live
// members' budget settings, the buckets' id and the members.
func parseBeat(raw []any) ([]int64, []string, string, []presenceMember, error) {
	bad := fmt.Errorf("presence script answered %v", raw)
	if len(raw) != 8 {
		return nil, nil, "", nil, bad
	}
	id, ok := raw[6].(string)
	if !ok || id == "" {
		return nil, nil, "", nil, bad
	}
	res := make([]int64, 5)
	for i := range res {
		v, ok := raw[i].(int64)
		if !ok {
			return nil, nil, "", nil, bad
		}
		res[i] = v
	}
	view, err := parseView(raw[7])
	if err != nil {
		return nil, nil, "", nil, err
	}
	vals, ok := raw[5].([]any)
	if !ok {
		return nil, nil, "", nil, bad
	}
	pool := make([]string, 0, len(vals))
	for _, v := range vals {
		if s, ok := v.(string); ok {
			pool = append(pool, s)
		}
	}
	return res, pool, id, view, nil
}

// beatStatus beats the pool's serve set and stamps the namespace: what
// `tidemark status` counts and the namespace upgrade's drain reads.
func (p *presence) beatStatus(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.every)
	defer cancel()
	var errs []error
	if err := serveScript.Run(ctx, p.rdb, []string{p.key}, p.id, rollout.DrainMargin.Milliseconds()).Err(); err != nil {
		errs = append(errs, fmt.Errorf("reader: presence in %s: %w", p.key, err))
	}
	errs = append(errs, rollout.StampNamespace(ctx, p.rdb, p.pool, p.ns))
	return errors.Join(errs...)
}

// failed counts and logs a failed beat (at most one warning per 10 s): a
// process the others cannot count is not admitted locally, and a wrong
// count in status or an unstamped namespace is the operator's to fix.
func (p *presence) failed(err error) {
	if p.errs != nil {
		p.errs.Inc()
	}
	if p.lastWarn.allow(time.Now()) {
		p.log.Warn("serve presence beat failed; while it fails this process is not counted in its pool and does not admit source reads locally when Redis is unreachable", "err", err)
	}
}

// run beats every second until ctx ends, then leaves the sets.
func (p *presence) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		for _, beat := range []func(context.Context) error{p.beat, p.beatStatus} {
			if err := beat(ctx); err != nil && ctx.Err() == nil {
				p.failed(err)
			}
		}
		select {
		case <-ctx.Done():
			p.leave()
			return
		case <-t.C:
		}
	}
}

// leave removes this process from the sets as it stops, so the others
// neither count it nor reserve its share, and stamps the namespace a last
// time: nothing is filled from here on.
func (p *presence) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var errs []error
	if z, ok := p.rdb.(redis.Cmdable); ok {
		errs = append(errs, z.ZRem(ctx, p.key, p.id).Err(), z.ZRem(ctx, p.procsKey, p.member).Err(), z.HDel(ctx, p.countKey, p.member).Err(),
			z.HDel(ctx, p.settingsKey, p.member).Err())
	}
	errs = append(errs, rollout.StampNamespace(ctx, p.rdb, p.pool, p.ns))
	if err := errors.Join(errs...); err != nil {
		p.log.Warn("reader: leaving the pool's presence failed; the others reserve this process's share until its entry expires", "err", err)
	}
}

// randomID is 16 random hex digits.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics instead)
	return hex.EncodeToString(b[:])
}
