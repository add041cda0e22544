package lifecycle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// The group stops phase by phase: a later phase's context ends only after
// every actor of the earlier phases has returned, whatever the Add order.
func TestGroupStopsPhaseByPhase(t *testing.T) {
	var mu sync.Mutex
	var order []string
	var g Group
	actor := func(name string, linger time.Duration) func(context.Context) error {
		return func(ctx context.Context) error {
			<-ctx.Done()
			time.Sleep(linger) // a slow flush must still finish before the next phase stops
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return ctx.Err()
		}
	}
	g.Add(Telemetry, "telemetry", actor("telemetry", 0))
	g.Add(Apply, "applier", actor("applier", 0))
	g.Add(Requests, "api", actor("api", 50*time.Millisecond))
	g.Add(Cache, "cache", actor("cache", 0))
	g.Add(Capture, "capture", actor("capture", 20*time.Millisecond))
	g.Add(Observe, "page", actor("page", 0))
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	if err := g.Run(ctx); err != nil {
		t.Fatalf("Run = %v, want nil (context.Canceled at a stop is not an error)", err)
	}
	want := []string{"api", "capture", "applier", "cache", "page", "telemetry"}
	if !slices.Equal(order, want) {
		t.Fatalf("stop order %v, want %v", order, want)
	}
}

// The first actor to fail stops the others, and its error is returned.
func TestGroupFirstErrorStopsAll(t *testing.T) {
	var g Group
	boom := errors.New("boom")
	stopped := make(chan struct{})
	g.Add(Apply, "applier", func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil })
	g.Add(Capture, "capture", func(context.Context) error { return boom })
	err := g.Run(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want boom", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the applier was not stopped")
	}
}

// A job that finishes (nil) ends the group without an error.
func TestGroupFinishedJobEndsGroup(t *testing.T) {
	var g Group
	g.Add(Requests, "replay", func(context.Context) error { return nil })
	g.Add(Telemetry, "telemetry", func(ctx context.Context) error { <-ctx.Done(); return nil })
	done := make(chan error, 1)
	go func() { done <- g.Run(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a finished job did not end the group")
	}
}

// ServeHTTP lets an in-flight request finish at shutdown and refuses new
// connections.
func TestServeHTTPDrainsInFlight(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		time.Sleep(200 * time.Millisecond)
		w.Write([]byte("done"))
	})}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeHTTP(ctx, srv, ln, 5*time.Second) }()
	got := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b := make([]byte, 4)
		n, _ := resp.Body.Read(b)
		got <- string(b[:n])
	}()
	<-started
	cancel()
	if s := <-got; s != "done" {
		t.Fatalf("in-flight request got %q, want done", s)
	}
	if err := <-served; err != nil {
		t.Fatalf("ServeHTTP = %v", err)
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Fatal("listener still accepts after shutdown")
	}
}

// In a group of services an actor that returns nil by itself is a failure
// naming it, and it stops the others; a service stopped by the group may
// return nil. Run (a group of jobs) takes the same nil as a finished job.
func TestRunServicesFailsOnSilentReturn(t *testing.T) {
	build := func() *Group {
		var g Group
		g.Add(Requests, "api", func(ctx context.Context) error { <-ctx.Done(); return nil })
		g.Add(Apply, "applier", func(context.Context) error { return nil })
		return &g
	}
	err := build().RunServices(context.Background())
	if !errors.Is(err, ErrStopped) || err.Error() != "applier: stopped unexpectedly" {
		t.Fatalf("RunServices = %v, want \"applier: stopped unexpectedly\" (ErrStopped) and nothing about the api, which was stopped", err)
	}
	if err := build().Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil: a finished job", err)
	}
}
