package testenv

import (
	"log/slog"
	"strings"
	"testing"
)

// Logger returns a slog.Logger that writes through t.Log, so output shows only
// for failing tests (or with -v).
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	defer func() { _ = recover() }() // a log line after the test ended must not panic
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
