package warm

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// States of a warm run in its progress.
const (
	StateRunning     = "running"
	StateBackingOff  = "backing off"
	StateDone        = "done"
	StateInterrupted = "interrupted" // the lease moved; the next holder warms again
)

// Progress is the last or current warm run as the warmer publishes it.
type Progress struct {
	State   string // one of the State constants
	Reason  string
	Tenant  string
	Total   int
	Done    int
	Filled  int
	Rate    float64 // keys/s allowed now
	Started time.Time
	Updated time.Time
}

func (w *Warmer) progress(ctx context.Context, state, reason string, req Request, total, done, filled int, rate float64, started time.Time) {
	err := w.d.Redis.HSet(ctx, ProgressKey(w.cfg.Namespace),
		"state", state, "reason", reason, "tenant", req.Tenant, "total", total, "done", done, "filled", filled,
		"rate", strconv.FormatFloat(rate, 'f', 0, 64), "started", started.UnixMilli(), "updated", time.Now().UnixMilli()).Err()
	if err != nil && ctx.Err() == nil {
		w.log.Debug("warm progress not published", "err", err)
	}
}

// ReadProgress reads the warmer's progress; ok is false when no run was
// ever published.
func ReadProgress(ctx context.Context, rdb redis.UniversalClient, ns string) (p Progress, ok bool, err error) {
	h, err := rdb.HGetAll(ctx, ProgressKey(ns)).Result()
	if err != nil {
		return Progress{}, false, fmt.Errorf("warm: read progress: %w", err)
	}
	if len(h) == 0 {
		return Progress{}, false, nil
	}
	atoi := func(f string) int { n, _ := strconv.Atoi(h[f]); return n }
	ms := func(f string) time.Time { n, _ := strconv.ParseInt(h[f], 10, 64); return time.UnixMilli(n) }
	r, _ := strconv.ParseFloat(h["rate"], 64)
	return Progress{State: h["state"], Reason: h["reason"], Tenant: h["tenant"], Total: atoi("total"), Done: atoi("done"),
		Filled: atoi("filled"), Rate: r, Started: ms("started"), Updated: ms("updated")}, true, nil
}

// String is the one-line summary `tidemark status` prints.
func (p Progress) String() string {
	who := ""
	if p.Tenant != "" {
		who = " of tenant " + p.Tenant
	}
	if p.State == StateDone {
		return fmt.Sprintf("warm: last run (%s) filled %d of the %d hottest keys%s, finished %s ago",
			p.Reason, p.Filled, p.Total, who, time.Since(p.Updated).Round(time.Second))
	}
	return fmt.Sprintf("warm: %s (%s): %d/%d keys%s, %d filled, %.0f keys/s", p.State, p.Reason, p.Done, p.Total, who, p.Filled, p.Rate)
}
