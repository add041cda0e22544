// Package proc is the lab's one child-process type: a tidemark stage, the
// embedded broker or any other program the chaos harness, the benchmarks and
// the process tests run. It starts a process with its output in a log file
// (or in memory), waits for it to be ready by its /readyz, stops it with a
// grace period, kills it with SIGKILL (a real kill -9: no shutdown code
// runs), sends it signals (SIGSTOP pauses it), and restarts it with the same
// arguments. Every process dies with the harness (Pdeathsig), so a failed
// test never leaves one behind.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Config names one process.
type Config struct {
	Name string   // for logs and errors
	Bin  string   // the program
	Args []string // its arguments
	Env  []string // added to the harness's environment at every start
	// Log is the file the process's output is appended to, with a header
	// line per start; empty keeps the output in memory (Output reads it).
	Log string
	// Group puts the process in a process group of its own, so a Ctrl-C
	// reaches only the harness, which then stops its processes itself.
	Group bool
}

// ErrNotRunning is returned by Signal when the process is not running.
var ErrNotRunning = errors.New("not running")

// Process is one child process, started and restarted from its Config.
type Process struct {
	cfg Config

	mu    sync.Mutex
	extra []string // environment of the latest start, reused by RestartIfExited
	cmd   *exec.Cmd
	done  chan struct{}
	mem   *buffer // the output when cfg.Log is empty
}

// New returns the process described by cfg, not started.
func New(cfg Config) *Process { return &Process{cfg: cfg} }

// Name is the process's name.
func (p *Process) Name() string { return p.cfg.Name }

// Config is the process's configuration.
func (p *Process) Config() Config {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg
}

// SetArgs replaces the arguments used by the next start.
func (p *Process) SetArgs(args ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Args = args
}

// SetBin replaces the program used by the next start (a rolling upgrade
// replaces the binary of a process between a stop and a start).
func (p *Process) SetBin(bin string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg.Bin = bin
}

// Start runs the process with extraEnv added to its environment; it does
// nothing if the process is running.
func (p *Process) Start(extraEnv ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	p.extra = extraEnv
	var out io.WriteCloser
	if p.cfg.Log != "" {
		f, err := os.OpenFile(p.cfg.Log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return fmt.Errorf("proc: %s log: %w", p.cfg.Name, err)
		}
		fmt.Fprintf(f, "=== %s start %s %v %v\n", time.Now().UTC().Format(time.RFC3339Nano), p.cfg.Bin, extraEnv, p.cfg.Args)
		out = f
	} else {
		if p.mem == nil {
			p.mem = &buffer{}
		}
		out = nopCloser{p.mem}
	}
	cmd := exec.Command(p.cfg.Bin, p.cfg.Args...)
	cmd.Env = append(append(os.Environ(), p.cfg.Env...), extraEnv...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: p.cfg.Group, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("proc: start %s: %w", p.cfg.Name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// Kill sends SIGKILL and waits for the exit (a stopped process needs no
// SIGCONT first: SIGKILL ends it either way).
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

// Stop asks for an orderly shutdown (SIGCONT, then SIGTERM) and kills the
// process if it has not exited after grace.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	p.cmd = nil
}

// Signal sends sig to the running process.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("proc: signal %s: %w", p.cfg.Name, ErrNotRunning)
	}
	return p.cmd.Process.Signal(sig)
}

// Pid is the running process's id (0 if it is not running).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Exited reports whether the process was started and has exited by itself.
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Done is closed when the current run exits (nil if it is not running).
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	return p.done
}

// ExitCode is the exit code of a run that has exited by itself, and -1
// while it runs or when it was not started (or was killed or stopped).
func (p *Process) ExitCode() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return -1
	}
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}

// ExitErr is nil while the process runs (or was never started) and, once it
// has exited by itself, an error with its exit state and its output's tail.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-done:
		return fmt.Errorf("proc: %s exited (%v):\n%s", p.cfg.Name, cmd.ProcessState, p.Tail(3000))
	default:
		return nil
	}
}

// RestartIfExited brings back a process that ended by itself, with the
// environment of its latest start (a stage may give up after a long outage;
// an operator's supervisor would restart it).
func (p *Process) RestartIfExited() (bool, error) {
	if !p.Exited() {
		return false, nil
	}
	p.mu.Lock()
	p.cmd = nil
	extra := p.extra
	p.mu.Unlock()
	return true, p.Start(extra...)
}

// Ready waits until GET base+"/readyz" answers 200, polling every 100 ms.
// It fails when the process exits, when ctx ends, or after limit, with the
// last answer and the output's tail.
func (p *Process) Ready(ctx context.Context, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for {
		if err := p.ExitErr(); err != nil {
			return err
		}
		if last = probe(ctx, base+"/readyz"); last == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("proc: %s not ready after %s: %w\n%s", p.cfg.Name, limit, last, p.Tail(3000))
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d", url, res.StatusCode)
	}
	return nil
}

// Output is everything the process has written: the in-memory output, or
// the log file's contents.
func (p *Process) Output() string {
	if p.cfg.Log != "" {
		b, _ := os.ReadFile(p.cfg.Log)
		return string(b)
	}
	p.mu.Lock()
	m := p.mem
	p.mu.Unlock()
	if m == nil {
		return ""
	}
	return m.String()
}

// Tail is the last n bytes of Output, trimmed.
func (p *Process) Tail(n int) string {
	s := p.Output()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return string(bytes.TrimSpace([]byte(s)))
}

// buffer is output written by exec's copier while a test reads it.
type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
