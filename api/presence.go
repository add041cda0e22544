package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// presence registers this serve process in Redis and counts the live ones,
// so that while Redis cannot be asked for the shared budget each process
// allows only its share of a class's rate (rate / live processes), never the
// whole rate. The last known count is kept while Redis is down.
type presence struct {
	rdb    redis.Scripter
	script *redis.Script
	key    string
	id     string
	ttl    time.Duration
	every  time.Duration
	n      atomic.Int64
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

func newPresence(namespace string, rdb redis.Scripter) *presence {
	var b [8]byte
	rand.Read(b[:])
	p := &presence{rdb: rdb, script: redis.NewScript(presenceLua), key: namespace + ":v1:_serve",
		id: hex.EncodeToString(b[:]), ttl: presenceTTL, every: presenceEvery}
	p.n.Store(1)
	return p
}

// count is the number of live serve processes, this one included.
func (p *presence) count() int64 { return max(1, p.n.Load()) }

// beat registers once and refreshes the count; on error the last count stays.
func (p *presence) beat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.every)
	defer cancel()
	n, err := p.script.Run(ctx, p.rdb, []string{p.key}, p.id, p.ttl.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	p.n.Store(n)
	return nil
}

// run beats every second until ctx ends, then leaves the set.
func (p *presence) run(ctx context.Context) {
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		p.beat(ctx)
		select {
		case <-ctx.Done():
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if z, ok := p.rdb.(redis.Cmdable); ok {
				z.ZRem(lctx, p.key, p.id)
			}
			cancel()
			return
		case <-t.C:
		}
	}
}
