package reader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
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
// old namespace draining.
type presence struct {
	rdb      redis.Scripter
	script   *redis.Script
	procsKey string // sorted set: member -> last beat (Redis ms)
	countKey string // hash: member -> the count its last beat saw
	key      string // the pool's serve set (status)
	pool     string
	ns       string
	id       string // "<namespace>/<random>"
	ttl      time.Duration
	late     time.Duration
	every    time.Duration
	log      *slog.Logger
	errs     prometheus.Counter // nil in unit tests of the fallback

	mu    sync.Mutex
	state presenceState

	lastWarn atomic.Int64
}

// presenceState is what the last successful beat established.
type presenceState struct {
	n        int64     // live readers of the pool, this one included
	sent     time.Time // when the last successful beat was sent (local clock)
	answered time.Time // when it was answered
	redisAt  int64     // Redis ms of that beat
	// attempted is the deadline of the last beat sent, answered or not: a
	// beat whose answer was lost may still have registered this process, up
	// to its deadline (the script refuses one that arrives later).
	attempted time.Time
	failing   bool  // the last beat failed: probe before registering again
	joined    int64 // Redis ms of this process's (re)registration
	// counted: every other live reader has beat since this one registered,
	// so each one's count includes it and no share this one takes is
	// already another's.
	counted bool
}

// presenceLua registers ARGV[1] at Redis's time in KEYS[1] with the count it
// sees in KEYS[2], dropping members not seen for ARGV[2] ms, unless it runs
// after ARGV[3] (Redis ms; 0: no deadline): then it returns {-1}. Else it
// returns the count, the time, whether the member was new (a first beat, or
// its entry was lost with the server) and the oldest beat of the others
// (-1: none).
const presenceLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[3])
if deadline > 0 and now > deadline then
  return {-1}
end
local ttl = tonumber(ARGV[2])
local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
for _, m in ipairs(gone) do
  redis.call('ZREM', KEYS[1], m)
  redis.call('HDEL', KEYS[2], m)
end
local added = redis.call('ZADD', KEYS[1], now, ARGV[1])
local n = redis.call('ZCARD', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], n)
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
redis.call('PEXPIRE', KEYS[2], 2 * ttl)
-- The oldest beat of the others: ZRANGE's first two members (with
-- scores), one of which may be this one.
local oldest = -1
local first = redis.call('ZRANGE', KEYS[1], 0, 1, 'WITHSCORES')
if first[1] and first[1] ~= ARGV[1] then
  oldest = tonumber(first[2])
elseif first[3] then
  oldest = tonumber(first[4])
end
return {n, now, added, oldest}`

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

const (
	presenceEvery = time.Second
	// presenceLate: a member not seen for this long may be admitting
	// locally; the others reserve its share. Two beats, so one beat slowed
	// by a loaded host only makes the others admit less for a moment.
	presenceLate = 2 * time.Second
	// presenceTTL: a member not seen for this long is dropped (and no
	// longer admits locally). A process admits locally from presenceLate
	// after its last beat attempt to presenceTTL after its last beat: about
	// presenceTTL - 3.75 s per outage, then it holds. A process killed
	// outright has its share reserved by the others from presenceLate to
	// presenceTTL after its last beat.
	presenceTTL = 8 * time.Second
	// presenceBeatTimeout bounds a beat: one that reaches Redis later
	// registers nothing.
	presenceBeatTimeout = 500 * time.Millisecond
	// localMargin ends local admission this much before the others drop
	// the member (and stop reserving its share).
	localMargin = 250 * time.Millisecond
)

// budgetTag is the hash tag of every key of a pool's budget: one Cluster
// slot, so one script reads the members and spends the buckets.
func budgetTag(pool string) string { return "{" + pool + ":v1:_budget}" }

func newPresence(pool, namespace string, rdb redis.Scripter) *presence {
	var b [8]byte
	rand.Read(b[:])
	tag := budgetTag(pool)
	return &presence{rdb: rdb, script: redis.NewScript(presenceLua), procsKey: tag + ":procs", countKey: tag + ":procs:n",
		key: rollout.ServeKey(pool), pool: pool, ns: namespace,
		id:  rollout.ServeMember(namespace, hex.EncodeToString(b[:])),
		ttl: presenceTTL, late: presenceLate, every: presenceEvery, log: slog.New(slog.DiscardHandler),
		state: presenceState{n: 1}}
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

// beat registers this process and refreshes its count; on error the last
// state stays (and ages: localWindow ends). The serve set and the namespace
// stamp are beaten after; their errors are returned too.
func (p *presence) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, presenceBeatTimeout)
	defer cancel()
	p.mu.Lock()
	last := p.state
	p.mu.Unlock()
	if last.failing {
		// After a failed beat, a probe first: a registration sent into a
		// dead connection may land later and move this process's beat past
		// what it knows, while a probe that lands late changes nothing.
		if err := p.rdb.Eval(ctx, "return 1", nil).Err(); err != nil {
			return fmt.Errorf("reader: presence probe: %w", err)
		}
	}
	sent := time.Now()
	var deadline int64 // in Redis ms, from the last beat's; none before the first
	if last.redisAt != 0 {
		deadline = last.redisAt + sent.Add(presenceBeatTimeout).Sub(last.answered).Milliseconds()
	}
	p.mu.Lock()
	p.state.attempted, p.state.failing = sent.Add(presenceBeatTimeout), true
	p.mu.Unlock()
	res, err := p.script.Run(ctx, p.rdb, []string{p.procsKey, p.countKey}, p.id, p.ttl.Milliseconds(), deadline).Int64Slice()
	switch {
	case err != nil:
	case len(res) == 1 && res[0] == -1:
		err = errors.New("the beat arrived after its deadline")
	case len(res) != 4:
		err = fmt.Errorf("presence script answered %v", res)
	}
	if err != nil {
		// The budget's registration failed; status's count and the
		// namespace stamp are beaten all the same (they judge no admission).
		return errors.Join(fmt.Errorf("reader: presence in %s: %w", p.procsKey, err), p.beatStatus(ctx))
	}
	n, now, added, oldest := res[0], res[1], res[2], res[3]
	p.mu.Lock()
	s := &p.state
	s.failing, s.redisAt = false, now
	if added == 1 || s.joined == 0 {
		// A first beat, or the entry was lost (Redis restarted empty): the
		// others' counts may not include this process until they beat again.
		s.joined, s.counted = now, false
	}
	if !s.counted && (oldest == -1 || oldest > s.joined) {
		s.counted = true
	}
	s.n, s.sent, s.answered = n, sent, time.Now()
	p.mu.Unlock()
	return p.beatStatus(ctx)
}

// beatStatus beats the pool's serve set and stamps the namespace: what
// `tidemark status` counts and the namespace upgrade's drain reads.
func (p *presence) beatStatus(ctx context.Context) error {
	var errs []error
	if err := serveScript.Run(ctx, p.rdb, []string{p.key}, p.id, p.ttl.Milliseconds()).Err(); err != nil {
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
	now := time.Now().UnixNano()
	if last := p.lastWarn.Load(); now-last > int64(10*time.Second) && p.lastWarn.CompareAndSwap(last, now) {
		p.log.Warn("serve presence beat failed; while it fails this process is not counted in its pool and does not admit source reads locally when Redis is unreachable", "err", err)
	}
}

// run beats every second until ctx ends, then leaves the sets.
func (p *presence) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		if err := p.beat(ctx); err != nil && ctx.Err() == nil {
			p.failed(err)
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if z, ok := p.rdb.(redis.Cmdable); ok {
				z.ZRem(lctx, p.key, p.id)
				z.ZRem(lctx, p.procsKey, p.id)
				z.HDel(lctx, p.countKey, p.id)
			}
			// The last stamp: nothing is filled from here on.
			rollout.StampNamespace(lctx, p.rdb, p.pool, p.ns)
			cancel()
			return
		case <-t.C:
		}
	}
}
