package wiring

import (
	"context"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/hotset"
)

// Counted is the API's cache-tier client with every lookup counted by T
// (the hot-set tracker).
// Reads answered by the API's in-process L1 do not reach it: a key that hot
// is still counted at least once per L1 lifetime per process, enough to rank
// among the hottest. The process's own lookups (cache.Background: the
// warmer's) are not demand and are not counted.
type Counted struct {
	api.Cache
	T *hotset.Tracker
}

// Lookup counts the read, then looks it up.
func (c Counted) Lookup(ctx context.Context, tenant, item string, minVersion int64) (cache.LookupResult, error) {
	if !cache.IsBackground(ctx) {
		c.T.Observe(tenant, item)
	}
	return c.Cache.Lookup(ctx, tenant, item, minVersion)
}

// LookupMany counts each read, then looks them up.
func (c Counted) LookupMany(ctx context.Context, tenant string, items []string) ([]cache.LookupResult, []error, error) {
	for _, item := range items {
		c.T.Observe(tenant, item)
	}
	return c.Cache.LookupMany(ctx, tenant, items)
}

// ReadReplica counts a read served from a hot key's copy: those reads keep
// the key in the hot set (and so its copies) as the lookups did.
func (c Counted) ReadReplica(ctx context.Context, tenant, item string, m cache.Manifest, i int) (cache.Entry, error) {
	c.T.Observe(tenant, item)
	return c.Cache.ReadReplica(ctx, tenant, item, m, i)
}
