package capture

import "context"

// Crash stops c as a killed process would: no flush, no final status; the
// Kafka client is closed with whatever it still buffers.
func Crash(c *Capture, stop context.CancelFunc) {
	c.crashed.Store(true)
	stop()
}
