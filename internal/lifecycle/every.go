package lifecycle

import (
	"context"
	"time"
)

// Every calls fn once a period, the first time a period from now, until ctx
// ends; a call that takes longer than a period delays the next (ticks are
// dropped, not queued).
func Every(ctx context.Context, period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}
