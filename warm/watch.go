package warm

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// lossMaxAge bounds how long a loss seen by a process that did not hold the
// lease still starts a run when it takes the lease over.
const lossMaxAge = time.Minute

// tier is what every serve process observes of the cache tier, lease or
// not: a process that takes the lease over right after a loss (the lease
// itself lived on the lost node, so any process may win it back) still
// knows the tier before the loss and warms.
type tier struct {
	mu        sync.Mutex
	seen      bool // a first check made the baseline
	lastReset time.Time
	lastID    string
	peak      float64
	loss      string // pending loss reason, "" when none
	lossAt    time.Time
}

// takeLoss returns and clears a pending loss seen within lossMaxAge, and
// when it was seen.
func (t *tier) takeLoss() (string, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	reason, at := t.loss, t.lossAt
	if time.Since(at) > lossMaxAge {
		reason = ""
	}
	t.loss = ""
	return reason, at
}

// observe checks the tier every CheckEvery in every process and records a
// loss: reset_at moved, the identity changed, or the key count collapsed.
func (w *Warmer) observe(ctx context.Context) {
	t := time.NewTicker(w.cfg.CheckEvery)
	defer t.Stop()
	for {
		w.check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Warmer) check(ctx context.Context) {
	s := &w.tier
	reason := ""
	wm := w.d.Cache.Watermark()
	id, idErr := w.d.Cache.ServerIdentity(ctx)
	n, nErr := w.keyCount(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	// One loss can show in several ways at once (a restarted node has a new
	// identity and no keys); the first, most specific, names it.
	if wm.ResetAt.After(s.lastReset) {
		if s.seen {
			reason = ReasonResetAt
		}
		s.lastReset = wm.ResetAt
	}
	s.seen = true
	if idErr == nil {
		if s.lastID != "" && id != s.lastID && reason == "" {
			reason = ReasonIdentity
		}
		s.lastID = id
	}
	if nErr == nil {
		if s.peak >= float64(w.cfg.MinPeakKeys) && float64(n) < w.cfg.Collapse*s.peak {
			if reason == "" {
				reason = ReasonCollapse
			}
			s.peak = float64(n) // the new baseline: one collapse is one loss
		}
		s.peak = max(float64(n), s.peak*0.995) // forget a peak over minutes
	}
	if reason != "" {
		s.loss, s.lossAt = reason, time.Now()
	}
}

// watch runs under the lease: every CheckEvery it takes a queued request or
// a loss the observer recorded, and warms.
func (w *Warmer) watch(ctx context.Context) error {
	t := time.NewTicker(w.cfg.CheckEvery)
	defer t.Stop()
	// A process taking the lease over looks at the tier first: a loss its
	// observer recorded earlier, warmed by the holder before it, may still
	// be pending here (a FLUSHALL also deletes the progress that would show
	// it covered), and the loss that moved the lease (a FLUSHALL deletes
	// the lease key too) must name the run, not the older one.
	w.check(ctx)
	for {
		reason, req := "", Request{Top: w.cfg.Top}
		if b, err := w.d.Redis.LPop(ctx, RequestsKey(w.cfg.Namespace)).Bytes(); err == nil {
			if err := json.Unmarshal(b, &req); err != nil || req.Top < 1 {
				w.log.Warn("ignoring a malformed warm request", "request", string(b), "err", err)
				req = Request{Top: w.cfg.Top}
			} else {
				reason = ReasonRequested
			}
		} else if !errors.Is(err, redis.Nil) && ctx.Err() == nil {
			w.log.Debug("warm requests unreadable", "err", err)
		}
		if loss, at := w.tier.takeLoss(); loss != "" && reason == "" && !w.covered(ctx, at) {
			reason = loss
		}
		if reason != "" {
			w.warm(ctx, reason, req)
			w.tier.takeLoss() // the run just made covers a loss seen meanwhile
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// covered reports whether a warm run (of this process or of the holder
// before it) that started after, or just before, a loss was seen at has
// finished: every process sees the same loss, a few checks apart, and an
// interrupted run is warmed again.
func (w *Warmer) covered(ctx context.Context, at time.Time) bool {
	p, ok, err := ReadProgress(ctx, w.d.Redis, w.cfg.Namespace)
	return err == nil && ok && p.State == StateDone && p.Started.After(at.Add(-3*w.cfg.CheckEvery))
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
