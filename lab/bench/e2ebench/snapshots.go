package e2ebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// checksMetric counts capture's visibility snapshots (capture/visible.go):
// read before and after a phase, it says how many transactions one
// snapshot query answered under that load.
const checksMetric = "tidemark_capture_visibility_checks_total"

// counterIn is the counter name in a Prometheus text exposition, summed
// over its series (the process labels each with the topic); ok is false
// when the exposition does not have it (a build without the metric).
func counterIn(r io.Reader, name string) (v float64, ok bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, found := strings.CutPrefix(line, name)
		if !found || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, false, fmt.Errorf("bench e2e: %s: %q: unterminated labels", name, line)
			}
			rest = rest[end+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false, fmt.Errorf("bench e2e: %s: %q: no value", name, line)
		}
		x, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return 0, false, fmt.Errorf("bench e2e: %s: %q: %w", name, line, err)
		}
		v, ok = v+x, true
	}
	return v, ok, sc.Err()
}

// snapshotsTaken scrapes capture's /metrics for checksMetric.
func snapshotsTaken(ctx context.Context, addr string) (float64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("bench e2e: capture's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, false, fmt.Errorf("bench e2e: capture's metrics: %s", resp.Status)
	}
	return counterIn(resp.Body, checksMetric)
}
