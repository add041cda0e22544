package reader

import (
	"sync/atomic"
	"time"
)

// warnInterval is how often a repeating failure is logged: a Redis outage
// fails every read and every beat, and one line per 10 s says it.
const warnInterval = 10 * time.Second

// warnEvery lets one warning through per warnInterval, across goroutines.
type warnEvery struct{ last atomic.Int64 } // unix nanos of the last one let through

// allow reports whether a warning at now is the first in warnInterval.
func (w *warnEvery) allow(now time.Time) bool {
	n := now.UnixNano()
	last := w.last.Load()
	return n-last > int64(warnInterval) && w.last.CompareAndSwap(last, n)
}
