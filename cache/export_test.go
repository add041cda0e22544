package cache

// UseWatermarkForTest makes wm the client's polled watermark, so a test can
// hand LOOKUP and the replica scripts a W the Go side would not pass (one
// ahead of the cache tier's clock) and see what the scripts make of it.
func (c *Client) UseWatermarkForTest(wm Watermark) { c.wm.Store(&wm) }
