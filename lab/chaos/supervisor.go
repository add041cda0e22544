package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// proc is one process of the system under test (a tidemark stage or the
// embedded broker): started, killed with -9, stopped and continued, and
// restarted with the same arguments, its output appended to a log file.
type proc struct {
	name string
	bin  string
	args []string
	env  []string // added to the harness's environment
	logf string

	mu    sync.Mutex
	extra []string // environment of the latest start, reused by restartIfExited
	cmd   *exec.Cmd
	done  chan struct{}
}

func (p *proc) start(extraEnv ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	p.extra = extraEnv
	out, err := os.OpenFile(p.logf, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %s log: %w", p.name, err)
	}
	fmt.Fprintf(out, "=== %s start %v %v\n", time.Now().UTC().Format(time.RFC3339Nano), extraEnv, p.args)
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(append(os.Environ(), p.env...), extraEnv...)
	cmd.Stdout, cmd.Stderr = out, out
	// Own process group: a Ctrl-C reaches the harness, which stops the
	// stages itself; killed with the harness if it dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("chaos: start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// kill sends SIGKILL (continuing a stopped process first is not needed:
// SIGKILL ends it either way) and waits for the exit.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

// stop asks for an orderly shutdown and kills after grace.
func (p *proc) stop(grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	p.cmd = nil
}

var errNotRunning = errors.New("not running")

// pid is the running process's id (0: not running).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("chaos: signal %s: %w", p.name, errNotRunning)
	}
	return p.cmd.Process.Signal(sig)
}

// exited reports whether the process was started and has exited by itself.
func (p *proc) exited() bool {
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

// restartIfExited brings back a process that ended by itself (a stage may
// give up after a long outage; an operator's supervisor would restart it).
func (p *proc) restartIfExited() (bool, error) {
	if !p.exited() {
		return false, nil
	}
	p.mu.Lock()
	p.cmd = nil
	extra := p.extra
	p.mu.Unlock()
	return true, p.start(extra...)
}
