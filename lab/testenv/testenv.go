// Package testenv starts the real servers integration tests talk to: a private
// Postgres from the installed binaries, private redis-server processes, and an
// in-process kfake Kafka cluster. Every server is stopped and its files removed
// when the test (or, for shared servers, the test binary) ends. A missing
// binary fails the test with the package to install; nothing is skipped.
package testenv

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/localserver"
)

// Main wraps testing.M.Run: it stops the package's shared servers afterwards.
// Use it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	shared.stopAll()
	os.Exit(code)
}

type sharedServers struct {
	mu    sync.Mutex
	stops []func()
}

var shared sharedServers

func (s *sharedServers) add(stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops = append(s.stops, stop)
}

func (s *sharedServers) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

var uniqueSeq atomic.Int64

// uniqueBase makes Unique's names differ between test binaries too: the
// binaries of one `go test` run may share a Kafka cluster (KafkaClusterEnv),
// and two packages may hold tests of the same name.
var uniqueBase = int64(os.Getpid()) * 1_000_000

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// Unique returns a name unique among running test binaries, derived from the test
// name, usable as a database, slot, topic or group name (lowercase, [a-z0-9_]).
func Unique(t testing.TB, prefix string) string {
	name := nonWord.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 30 {
		name = name[len(name)-30:]
	}
	return strings.Trim(fmt.Sprintf("%s_%s_%d", prefix, name, uniqueBase+uniqueSeq.Add(1)), "_")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := localserver.FreePort()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// Eventually polls cond every tick until it returns nil or the deadline passes,
// then fails the test with the last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := 20 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s: not true after %s: %v", what, timeout, err)
		}
		time.Sleep(tick)
		if tick < 200*time.Millisecond {
			tick *= 2
		}
	}
}

// Context returns a context cancelled when the test ends, bounded by timeout.
func Context(t testing.TB, timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// LaneEnv is set by lab/unitlane, the fast lane (make test-unit), which
// runs only the tests it read as server-free.
const LaneEnv = "TIDEMARK_UNIT_LANE"

// needServer fails a test of the fast lane that starts a server or builds a
// binary: the lane's reading of it was wrong, and the lane must stay fast
// and need nothing but Go.
func needServer(t testing.TB, what string) {
	t.Helper()
	if os.Getenv(LaneEnv) != "" {
		t.Fatalf("testenv: %s calls %s, but %s is set: the fast lane (make test-unit, lab/unitlane) runs only server-free tests, and its reading of this one missed the call", t.Name(), what, LaneEnv)
	}
}
