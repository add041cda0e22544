package cache

import "time"

// UseWatermarkForTest makes wm the client's polled watermark, so a test can
// hand LOOKUP and the replica scripts a W the Go side would not pass (one
// ahead of the cache tier's clock) and see what the scripts make of it.
func (c *Client) UseWatermarkForTest(wm Watermark) { c.wm.Store(&wm) }

// SetHardLifetimeForTest gives the client a hard lifetime its Validate
// would refuse (above promise.HardLifetime), as a client of a build without
// that bound would send, so a test can see FILL's own guard refuse it.
func (c *Client) SetHardLifetimeForTest(d time.Duration) { c.cfg.HardLifetime = d }
