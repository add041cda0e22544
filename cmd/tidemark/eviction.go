package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"tidemark/cache"
)

// checkEvictionPolicy refuses an allkeys-* maxmemory-policy. A cache tier
// that cannot be asked now does not stop serve (reads fall back to the
// source); the applier refuses such a tier when it starts.
func checkEvictionPolicy(ctx context.Context, cc *cache.Client, log *slog.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := cc.CheckEvictionPolicy(pctx)
	if errors.Is(err, cache.ErrEvictionPolicy) {
		return fmt.Errorf("%w (--allow-allkeys-eviction)", err)
	}
	if err != nil {
		log.Warn("cannot read the cache tier's maxmemory-policy; starting anyway", "err", err)
	}
	return nil
}
