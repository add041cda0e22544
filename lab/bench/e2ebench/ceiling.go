package e2ebench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// findRecvlogical finds pg_recvlogical in /usr/lib/postgresql/*/bin or PATH.
func findRecvlogical() (string, error) {
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_recvlogical")
	sort.Sort(sort.Reverse(sort.StringSlice(bins)))
	if len(bins) > 0 {
		return bins[0], nil
	}
	if p, err := exec.LookPath("pg_recvlogical"); err == nil {
		return p, nil
	}
	return "", errors.New("bench e2e: pg_recvlogical not found in /usr/lib/postgresql/*/bin or PATH: apt-get install -y postgresql-client-15")
}

// recvlogical is pg_recvlogical streaming a test_decoding slot to a pipe,
// with commit timestamps: each "COMMIT <xid> (at <ts>)" line read is one
// commit → received sample.
type recvlogical struct {
	cmd  *exec.Cmd
	done chan struct{}

	mu        sync.Mutex
	recording bool
	samples   []sample
	parseErr  error
}

// test_decoding prints timestamptz in the server's ISO style.
const pgTimeLayout = "2006-01-02 15:04:05.999999-07"

func startRecvlogical(ctx context.Context, bin, dsn, slot string) (*recvlogical, error) {
	if out, err := exec.CommandContext(ctx, bin, "-d", dsn, "--slot", slot, "--create-slot", "-P", "test_decoding").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("bench e2e: pg_recvlogical --create-slot: %v: %s", err, out)
	}
	cmd := exec.Command(bin, "-d", dsn, "--slot", slot, "--start", "--no-loop", "-o", "include-timestamp=on",
		"-o", "skip-empty-xacts=on", "-f", "-")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench e2e: start pg_recvlogical: %w", err)
	}
	r := &recvlogical{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			at := time.Now()
			line := sc.Text()
			if !strings.HasPrefix(line, "COMMIT ") {
				continue
			}
			i, j := strings.Index(line, "(at "), strings.LastIndexByte(line, ')')
			if i < 0 || j < i {
				continue
			}
			ts, err := time.Parse(pgTimeLayout, line[i+4:j])
			r.mu.Lock()
			if err != nil && r.parseErr == nil {
				r.parseErr = fmt.Errorf("bench e2e: pg_recvlogical commit line %q: %w", line, err)
			} else if r.recording {
				r.samples = append(r.samples, sample{ts, at.Sub(ts)})
			}
			r.mu.Unlock()
		}
		cmd.Wait()
	}()
	return r, nil
}

func (r *recvlogical) record(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recording = on
}

func (r *recvlogical) count() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.done:
		return len(r.samples), errors.New("bench e2e: pg_recvlogical exited")
	default:
	}
	return len(r.samples), r.parseErr
}

// stop ends pg_recvlogical (SIGINT: it confirms what it wrote and exits).
func (r *recvlogical) stop() []sample {
	r.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.cmd.Process.Kill()
		<-r.done
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.samples
}
