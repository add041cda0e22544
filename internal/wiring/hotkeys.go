package wiring

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/replica"
)

// HotKeys feeds a replica.Builder from the namespace's fast hot set (rates
// over seconds: a key that turns hot gets copies within seconds; warm-up
// ordering reads the slow set).
func HotKeys(rdb redis.UniversalClient, ns string) func(context.Context, int) ([]replica.HotKey, error) {
	return func(ctx context.Context, n int) ([]replica.HotKey, error) {
		top, err := hotset.ReadFast(ctx, rdb, ns, n)
		out := make([]replica.HotKey, len(top))
		for i, h := range top {
			out[i] = replica.HotKey{Tenant: h.Tenant, Item: h.Item, Rate: h.Rate}
		}
		return out, err
	}
}
