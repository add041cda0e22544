package telemetry

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Loop is the liveness of one of a process's own loops: the loop beats each
// time round, and Check fails once it has not beaten for longer than its
// bound while it was supposed to run. A loop that legitimately waits (a
// standby capture's stream, which does not run) pauses it.
type Loop struct {
	name   string
	bound  time.Duration
	last   atomic.Int64 // unix nanoseconds of the last beat
	paused atomic.Bool
}

// NewLoop is a loop named name that must beat at least every bound. It
// starts paused.
func NewLoop(name string, bound time.Duration) *Loop {
	l := &Loop{name: name, bound: bound}
	l.paused.Store(true)
	return l
}

// Beat records progress and resumes a paused loop.
func (l *Loop) Beat() {
	l.last.Store(time.Now().UnixNano())
	l.paused.Store(false)
}

// Pause stops watching the loop until its next Beat.
func (l *Loop) Pause() { l.paused.Store(true) }

// Check reports an error when the loop runs and its last beat is older than
// its bound.
func (l *Loop) Check(now time.Time) error {
	if l.paused.Load() {
		return nil
	}
	if since := now.Sub(time.Unix(0, l.last.Load())); since > l.bound {
		return fmt.Errorf("%s: no progress for %s (bound %s)", l.name, since.Round(time.Millisecond), l.bound)
	}
	return nil
}
