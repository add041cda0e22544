package testenv

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a slog.Logger that writes through t.Log, so output shows only
// for failing tests (or with -v). Lines logged once the test has ended (a
// client's goroutine still winding down) are dropped: t.Log then races with
// the test's end under the race detector, and panics without it.
func Logger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ended = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	t     testing.TB
	mu    sync.Mutex // held across t.Log, so the test's end waits for a line in progress
	ended bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
