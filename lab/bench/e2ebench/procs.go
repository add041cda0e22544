package e2ebench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// proc is one stage process of the tidemark binary.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// ProfileEnv and TraceEnv, set for a stage, make the tidemark process write
// its CPU profile and its execution trace to the files they name
// (cmd/tidemark reads them).
const (
	ProfileEnv = "TIDEMARK_CPU_PROFILE"
	TraceEnv   = "TIDEMARK_TRACE"
)

// diag says which diagnostics the stages write to the work directory.
type diag struct{ profile, trace bool }

// startProc runs bin args..., its output in <dir>/<name>.log; its CPU
// profile goes to <dir>/<name>.pprof and its execution trace to
// <dir>/<name>.trace when d asks.
func startProc(dir, name string, d diag, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if d.profile || d.trace {
		cmd.Env = os.Environ()
	}
	if d.profile {
		cmd.Env = append(cmd.Env, ProfileEnv+"="+filepath.Join(dir, name+".pprof"))
	}
	if d.trace {
		cmd.Env = append(cmd.Env, TraceEnv+"="+filepath.Join(dir, name+".trace"))
	}
	// Killed with the bench, never left behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench e2e: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports an error if the process has stopped, with its log's tail.
func (p *proc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("bench e2e: %s exited (%v):\n%s", p.name, p.cmd.ProcessState, logTail(p.log))
	default:
		return nil
	}
}

// stop asks for a clean shutdown (SIGTERM) and kills after 30 s.
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(bytes.TrimSpace(b))
}

// cpuTime is the user+system CPU a process has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("bench e2e: cpu of pid %d: %w", pid, err)
	}
	// Fields after the command name (which may hold spaces) start at state.
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("bench e2e: /proc/%d/stat has %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bench e2e: /proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// peakRSS is the process's high-water resident set size (VmHWM), in bytes.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("bench e2e: rss of pid %d: %w", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bench e2e: /proc/%d/status VmHWM %q", pid, v)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("bench e2e: /proc/%d/status has no VmHWM", pid)
}

// meter samples the CPU of named processes at a phase's start and end.
type meter struct {
	pids  map[string]int
	start map[string]time.Duration
}

func newMeter(pids map[string]int) (*meter, error) {
	m := &meter{pids: pids, start: map[string]time.Duration{}}
	for n, pid := range pids {
		c, err := cpuTime(pid)
		if err != nil {
			return nil, err
		}
		m.start[n] = c
	}
	return m, nil
}

// usage is each process's CPU since newMeter, and its peak RSS so far.
func (m *meter) usage() (map[string]time.Duration, map[string]int64, error) {
	cpu, rss := map[string]time.Duration{}, map[string]int64{}
	for n, pid := range m.pids {
		c, err := cpuTime(pid)
		if err != nil {
			return nil, nil, err
		}
		cpu[n] = c - m.start[n]
		if rss[n], err = peakRSS(pid); err != nil {
			return nil, nil, err
		}
	}
	return cpu, rss, nil
}

// boxCPU is the whole machine's busy and total CPU time so far, from
// /proc/stat (every process, not only the pipeline's: Postgres's committing
// backends too).
func boxCPU() (busy, total time.Duration, err error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, fmt.Errorf("bench e2e: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("bench e2e: /proc/stat starts %q", line)
	}
	// user nice system idle iowait irq softirq [steal ...], in clock ticks
	var ticks [8]int64
	for i := range ticks {
		if i+1 < len(f) {
			if ticks[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				return 0, 0, fmt.Errorf("bench e2e: /proc/stat: %w", err)
			}
		}
	}
	var all int64
	for _, t := range ticks {
		all += t
	}
	idle := ticks[3] + ticks[4]
	const tick = 10 * time.Millisecond // USER_HZ is 100 on Linux
	return time.Duration(all-idle) * tick, time.Duration(all) * tick, nil
}
