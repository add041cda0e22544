package proc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestStartKillRestart(t *testing.T) {
	log := filepath.Join(t.TempDir(), "p.log")
	p := New(Config{Name: "sleeper", Bin: "/bin/sh", Args: []string{"-c", "echo started $TAG; exec sleep 60"}, Log: log})
	if err := p.Start("TAG=one"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "first output", func() bool { return strings.Contains(p.Output(), "started one") })
	pid := p.Pid()
	p.Kill()
	if p.Pid() != 0 || p.Exited() {
		t.Fatalf("after Kill: pid %d exited %v, want 0 and false", p.Pid(), p.Exited())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("pid %d still exists after Kill: %v", pid, err)
	}
	if err := p.Signal(syscall.SIGCONT); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Signal on a killed process: %v, want ErrNotRunning", err)
	}
	if err := p.Start("TAG=two"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second output", func() bool { return strings.Contains(p.Output(), "started two") })
	// The process ends by itself; RestartIfExited brings it back with the
	// environment of its latest start.
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "exit by itself", p.Exited)
	if err := p.ExitErr(); err == nil || !strings.Contains(err.Error(), "started two") {
		t.Fatalf("ExitErr %v, want the exit with the output's tail", err)
	}
	ok, err := p.RestartIfExited()
	if !ok || err != nil {
		t.Fatalf("RestartIfExited = %v, %v", ok, err)
	}
	waitFor(t, "second start's output", func() bool { return strings.Count(p.Output(), "started two") == 2 })
	p.Stop(5 * time.Second)
	if n := strings.Count(p.Output(), "=== "); n != 3 {
		t.Fatalf("%d start headers in the log, want 3:\n%s", n, p.Output())
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	p := New(Config{Name: "stubborn", Bin: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo up; while :; do sleep 1; done"}})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "trap set", func() bool { return strings.Contains(p.Output(), "up") })
	start := time.Now()
	p.Stop(300 * time.Millisecond)
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("Stop returned after %s, before its grace: SIGTERM should have been ignored", d)
	}
	if p.Pid() != 0 {
		t.Fatal("still running after Stop")
	}
}

func TestReadyWaitsForReadyzAndFailsOnExit(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	p := New(Config{Name: "waiter", Bin: "/bin/sh", Args: []string{"-c", "exec sleep 60"}})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if err := p.Ready(context.Background(), srv.URL, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("Ready before /readyz answers 200: %v, want a not-ready error naming 503", err)
	}
	time.AfterFunc(200*time.Millisecond, func() { ready.Store(true) })
	if err := p.Ready(context.Background(), srv.URL, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	q := New(Config{Name: "quitter", Bin: "/bin/sh", Args: []string{"-c", "echo bad config; exit 3"}})
	if err := q.Start(); err != nil {
		t.Fatal(err)
	}
	err := q.Ready(context.Background(), srv.URL+"/nothing", time.Minute)
	if err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "bad config") {
		t.Fatalf("Ready of a process that exits: %v, want its exit status and output", err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
