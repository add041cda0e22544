package capture

import (
	"context"
	"time"
)

// Crash stops c as a killed process would: no flush, no final status; the
// Kafka client is closed with whatever it still buffers.
func Crash(c *Capture, stop context.CancelFunc) {
	c.crashed.Store(true)
	stop()
}

// SlowVisibilityChecks makes every visibility snapshot of c take d longer,
// as from a Postgres d away. Call it before Run.
func SlowVisibilityChecks(c *Capture, d time.Duration) { c.checkDelay = d }
