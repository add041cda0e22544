package cache_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// BenchmarkInvalidateBatch measures the client side of a 500-key batch
// against a private redis-server (for profiling; `tidemark-lab bench cache`
// reports the figures beside the ceilings).
func BenchmarkInvalidateBatch(b *testing.B) {
	r := testenv.StartRedis(b)
	c, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: r.Client(b), Log: nil, Registerer: nil})
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
