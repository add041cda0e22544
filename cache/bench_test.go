package cache_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"tidemark/cache"
	"tidemark/internal/testenv"
)

// BenchmarkInvalidateBatch measures the client side of a 500-key batch
// against a private redis-server (for profiling; `tidemark bench cache`
// reports the figures beside the ceilings).
func BenchmarkInvalidateBatch(b *testing.B) {
	r := testenv.StartRedis(b)
	c, err := cache.New(cache.DefaultConfig(), r.Client(b), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	batch := make([]cache.Invalidation, 500)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range batch {
			batch[j] = cache.Invalidation{Tenant: "bench", Item: "item" + strconv.Itoa(i*500+j), Version: 1}
		}
		if _, err := c.InvalidateBatch(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*500)/b.Elapsed().Seconds(), "keys/s")
}

// The benchmark command runs end to end on a small scale and prints the
// table with every row.
func TestRunBenchSmoke(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := cache.DefaultBenchConfig()
	cfg.RedisURL, cfg.Keys, cfg.Batch, cfg.Lookups, cfg.Rounds, cfg.Clients, cfg.Pipeline = r.URL(), 2000, 100, 200, 1, 4, 10
	var out strings.Builder
	if err := cache.RunBench(testenv.Context(t, 60*time.Second), cfg, &out); err != nil {
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
