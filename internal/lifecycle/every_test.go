package lifecycle

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// Every calls fn a period in and again each period, and returns once ctx
// ends, calling fn no more.
func TestEvery(t *testing.T) {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Every(ctx, 5*time.Millisecond, func() { n.Add(1) }); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("fn called %d times in 10s at a 5ms period, want at least 3", n.Load())
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return within 10s of ctx ending")
	}
	after := n.Load()
	time.Sleep(20 * time.Millisecond)
	if n.Load() != after {
		t.Fatalf("fn called %d more times after Every returned", n.Load()-after)
	}
}
