package reader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/rollout"
)

// presence registers this serve process in Redis and counts the live ones
// of its source pool, so that while Redis cannot be asked for the shared
// budget each process allows only its share of a class's rate (rate / live
// processes), never the whole rate. The last known count is kept while
// Redis is down. It also stamps the namespace the process fills in the
// pool's namespace hash, every beat and as it leaves, which `tidemark
// status` reads to show a namespace upgrade's old namespace draining.
type presence struct {
	rdb    redis.Scripter
	log    *slog.Logger
	script *redis.Script
	key    string
	pool   string
	ns     string
	id     string // "<namespace>/<random>"
	ttl    time.Duration
	every  time.Duration
	n      atomic.Int64
	joined atomic.Int64 // unix nanos of this process's first counted beat (0: none yet)
}

// presenceLua: register ARGV[1] at Redis's time, drop members not seen for
// ARGV[2] ms, return the count.
const presenceLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
return redis.call('ZCARD', KEYS[1])`

const (
	presenceEvery = time.Second
	presenceTTL   = 5 * time.Second
)

func newPresence(pool, namespace string, rdb redis.Scripter, log *slog.Logger) *presence {
	var b [8]byte
	rand.Read(b[:])
	p := &presence{rdb: rdb, log: log, script: redis.NewScript(presenceLua), key: rollout.ServeKey(pool), pool: pool, ns: namespace,
		id: rollout.ServeMember(namespace, hex.EncodeToString(b[:])), ttl: presenceTTL, every: presenceEvery}
	p.n.Store(1)
	return p
}

// count is the number of live serve processes, this one included.
func (p *presence) count() int64 { return max(1, p.n.Load()) }

// share is the number of live serve processes to divide a rate by, and
// whether it is known: a process that has never counted the others, or
// whose first beat the others may not have counted yet (they beat every
// second), does not know which share is its own.
func (p *presence) share(now time.Time) (int64, bool) {
	j := p.joined.Load()
	return p.count(), j != 0 && now.Sub(time.Unix(0, j)) >= 2*p.every
}

// beat registers once and refreshes the count; on error the last count stays.
func (p *presence) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.every)
	defer cancel()
	n, err := p.script.Run(ctx, p.rdb, []string{p.key}, p.id, p.ttl.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	p.n.Store(n)
	p.joined.CompareAndSwap(0, time.Now().UnixNano())
	return rollout.StampNamespace(ctx, p.rdb, p.pool, p.ns)
}

// run beats every second until ctx ends, then leaves the set.
func (p *presence) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		if err := p.beat(ctx); err != nil && ctx.Err() == nil {
			// The count stays at its last value; the next beat tries again.
			p.log.Warn("reader: presence beat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if z, ok := p.rdb.(redis.Cmdable); ok {
				z.ZRem(lctx, p.key, p.id)
			}
			// The last stamp: nothing is filled from here on.
			if err := rollout.StampNamespace(lctx, p.rdb, p.pool, p.ns); err != nil {
				p.log.Warn("reader: last namespace stamp failed", "err", err)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
