package localserver

// Pause and Resume simulate a hung server for tests of bounded calls.

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Pause stops the server with SIGSTOP: connections stay open and nothing
// answers, as with a hung host. Resume continues it.
func (r *Redis) Pause() { r.sendSignal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (r *Redis) Resume() { r.sendSignal(syscall.SIGCONT) }

func (r *Redis) sendSignal(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		r.cmd.Process.Signal(sig)
	}
}

// Pause stops the postmaster and every backend with SIGSTOP: connections stay
// open and nothing answers. Resume continues them.
func (pg *Postgres) Pause() { pg.signalAll(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (pg *Postgres) Resume() { pg.signalAll(syscall.SIGCONT) }

// signalAll signals the postmaster and its children. Backends are leaders of
// their own sessions (postgres calls setsid), so the process group is not
// enough; children are found by their parent pid in /proc.
func (pg *Postgres) signalAll(sig syscall.Signal) {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	if pg.cmd == nil {
		return
	}
	pid := pg.cmd.Process.Pid
	syscall.Kill(pid, sig)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		_, rest, ok := strings.Cut(string(b), ") ")
		if f := strings.Fields(rest); ok && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			syscall.Kill(child, sig)
		}
	}
}
