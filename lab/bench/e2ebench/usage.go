package e2ebench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/lab/proc"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProfileEnv and TraceEnv, set for a stage, make the tidemark process write
// its CPU profile and its execution trace to the files they name
// (cmd/tidemark reads them).
const (
	ProfileEnv = "TIDEMARK_CPU_PROFILE"
	TraceEnv   = "TIDEMARK_TRACE"
)

// diag says which diagnostics the stages write to the work directory.
type diag struct{ profile, trace bool }

// stopGrace is how long a stage has for a clean shutdown before it is killed.
const stopGrace = 30 * time.Second

// startProc runs bin args..., its output in <dir>/<name>.log; its CPU
// profile goes to <dir>/<name>.pprof and its execution trace to
// <dir>/<name>.trace when d asks.
func startProc(dir, name string, d diag, bin string, args ...string) (*proc.Process, error) {
	var env []string
	if d.profile {
		env = append(env, ProfileEnv+"="+filepath.Join(dir, name+".pprof"))
	}
	if d.trace {
		env = append(env, TraceEnv+"="+filepath.Join(dir, name+".trace"))
	}
	p := proc.New(proc.Config{Name: name, Bin: bin, Args: args, Env: env, Log: filepath.Join(dir, name+".log")})
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("bench e2e: %w", err)
	}
	return p, nil
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
