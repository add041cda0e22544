package cachebench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/cachebench"
	"github.com/tidemark/tidemark/lab/testenv"
)

// The benchmark command runs end to end on a small scale, prints the table
// with every row and writes the throughput chart beside it.
func TestRunBenchSmoke(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := cachebench.DefaultConfig()
	cfg.RedisURL, cfg.Keys, cfg.Batch, cfg.Lookups, cfg.Rounds, cfg.Clients, cfg.Pipeline = r.URL(), 2000, 100, 200, 1, 4, 10
	svgPath := filepath.Join(t.TempDir(), "charts", "cache.svg")
	var out strings.Builder
	res, err := cachebench.Run(testenv.Context(t, 60*time.Second), cfg, cachebench.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.Print(&out, res, svgPath, cachebench.Chart); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"InvalidateBatch, 4 workers, new keys", "pipelined SET", "Lookup hit latency p99", "redis-server CPU", "Goal:", "100.0% hits"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// The CPU row must carry measured figures, not zeros: a smoke run's
	// invalidations cost the server only a few ms in all.
	row := ") |"
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "redis-server CPU per invalidation") {
			row = line
		}
	}
	var ours, trivial float64
	if _, err := fmt.Sscanf(row[strings.LastIndex(row, ") |")+3:], " %f µs | trivial HSET script: %f µs", &ours, &trivial); err != nil || !(ours > 0) || !(trivial > 0) {
		t.Errorf("redis-server CPU row: want both figures > 0 µs, got ours %v trivial %v (%v) in %q", ours, trivial, err, row)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatalf("chart not written: %v", err)
	}
	if d := svgcharttest.Parse(t, string(svg)); d.Count("bar", "tidemark InvalidateBatch") != 5 {
		t.Errorf("chart has %d tidemark bars, want 5", d.Count("bar", "tidemark InvalidateBatch"))
	}
	if !strings.Contains(out.String(), "chart: "+svgPath) {
		t.Errorf("report does not name the chart %s:\n%s", svgPath, out.String())
	}
	cfg.Keys = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Keys:") {
		t.Errorf("Validate(keys=0) = %v", err)
	}
}
