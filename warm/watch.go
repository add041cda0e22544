package warm

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// watch checks every CheckEvery for a loss or a queued request and warms.
func (w *Warmer) watch(ctx context.Context) error {
	t := time.NewTicker(w.cfg.CheckEvery)
	defer t.Stop()
	var (
		lastReset time.Time
		lastID    string
		peak      float64
		first     = true
	)
	for {
		reason, req := "", Request{Top: w.cfg.Top}
		if b, err := w.d.Redis.LPop(ctx, RequestsKey(w.cfg.Namespace)).Bytes(); err == nil {
			if err := json.Unmarshal(b, &req); err != nil || req.Top < 1 {
				w.log.Warn("ignoring a malformed warm request", "request", string(b), "err", err)
			} else {
				reason = "requested"
			}
		} else if !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			w.log.Debug("warm requests unreadable", "err", err)
		}
		if wm := w.d.Cache.Watermark(); wm.ResetAt.After(lastReset) {
			if !first && !lastReset.IsZero() {
				reason = "reset_at moved"
			}
			lastReset = wm.ResetAt
		}
		if id, err := w.d.Cache.ServerIdentity(ctx); err == nil {
			if lastID != "" && id != lastID {
				reason = "cache tier identity changed"
			}
			lastID = id
		}
		if n, err := w.keyCount(ctx); err == nil {
			if peak >= float64(w.cfg.MinPeakKeys) && float64(n) < w.cfg.Collapse*peak {
				reason = "key count collapsed"
			}
			peak = max(float64(n), peak*0.995) // forget a peak over minutes
		}
		first = false
		if reason != "" {
			w.warm(ctx, reason, req)
			if n, err := w.keyCount(ctx); err == nil {
				peak = float64(n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// keyCount is the tier's total DBSIZE over every master.
func (w *Warmer) keyCount(ctx context.Context) (int64, error) {
	var (
		mu    sync.Mutex
		total int64
	)
	count := func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		mu.Lock()
		total += n
		mu.Unlock()
		return err
	}
	var err error
	switch r := w.d.Redis.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, count)
	case *redis.Client:
		err = count(ctx, r)
	default:
		err = errors.New("unsupported redis client")
	}
	return total, err
}
