// Package elect runs a task in exactly one process of a namespace at a time,
// under a lease in Redis: SET NX with a TTL, renewed by its holder. The
// holder's task is cancelled as soon as a renewal fails or finds the lease
// taken, so two holders overlap by at most one renewal interval even when
// Redis answers late.
package elect

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// renew extends the lease only for its holder, and takes it back when it is
// vacant (the Redis that held it restarted empty: nobody else holds it);
// release deletes it only for its holder.
var (
	renew = redis.NewScript(`local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0`)
	release = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// Lease is one named lease; Hold runs a task under it.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	owner string
	ttl   time.Duration
	log   *slog.Logger
}

// New makes a lease on key with a random owner id. ttl bounds how long a
// crashed holder keeps the task from the others.
func New(rdb redis.UniversalClient, key string, ttl time.Duration, log *slog.Logger) (*Lease, error) {
	if rdb == nil || key == "" {
		return nil, errors.New("elect: redis client and key are required")
	}
	if ttl < 30*time.Millisecond {
		return nil, fmt.Errorf("elect: lease TTL %s is below 30ms", ttl)
	}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("elect: owner id: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Lease{rdb: rdb, key: key, owner: hex.EncodeToString(b[:]), ttl: ttl, log: log.With("lease", key)}, nil
}

// Hold tries to take the lease every ttl/3 until ctx ends; while it holds
// it, task runs with a context cancelled when the lease is lost. A task
// error is logged and the lease released, then Hold competes again. Hold
// returns nil when ctx ends.
func (l *Lease) Hold(ctx context.Context, task func(context.Context) error) error {
	every := l.ttl / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		ok, err := l.rdb.SetNX(ctx, l.key, l.owner, l.ttl).Result()
		if err == nil && ok {
			l.log.Info("lease taken; running")
			if err := l.run(ctx, task, every); err != nil && ctx.Err() == nil {
				l.log.Warn("task under lease ended", "err", err)
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = release.Run(rctx, l.rdb, []string{l.key}, l.owner).Err()
			cancel()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (l *Lease) run(ctx context.Context, task func(context.Context) error, every time.Duration) error {
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- task(tctx) }()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
			n, err := renew.Run(tctx, l.rdb, []string{l.key}, l.owner, l.ttl.Milliseconds()).Int64()
			if err != nil || n == 0 {
				if ctx.Err() == nil {
					l.log.Warn("lease lost; stopping", "err", err)
				}
				cancel()
				return <-done
			}
		}
	}
}
