package cache_test

import (
	"strings"
	"testing"
	"time"

	cachebench "tidemark/internal/bench/cache"
	"tidemark/internal/testenv"
)

// The benchmark command runs end to end on a small scale and prints the
// table with every row.
func TestRunBenchSmoke(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := cachebench.DefaultBenchConfig()
	cfg.RedisURL, cfg.Keys, cfg.Batch, cfg.Lookups, cfg.Rounds, cfg.Clients, cfg.Pipeline = r.URL(), 2000, 100, 200, 1, 4, 10
	var out strings.Builder
	if err := cachebench.RunBench(testenv.Context(t, 60*time.Second), cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"InvalidateBatch, 4 workers, new keys", "pipelined SET", "Lookup hit latency p99", "redis-server CPU", "Goal:", "100.0% hits"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	cfg.Keys = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "--keys") {
		t.Errorf("Validate(keys=0) = %v", err)
	}
}
