// Package replica spreads the reads of a hot key over several Redis masters.
// The Builder (one per serve process) finds keys above a read-rate threshold
// in the fast hot set (hotset.ReadFast) and keeps a verified copy set of
// each one published through a manifest on the primary entry; the Reader
// serves reads from a copy chosen by a stable hash of the reader, and falls
// back to the primary whenever a copy is missing, mismatched or past its
// deadline. The cache tier's scripts (cache/replica.go) hold the rules:
// copies carry the primary's version and absolute deadlines, a set is
// published only complete and only while the primary still holds its
// version, and INVALIDATE revokes the manifest with the floor.
// docs/design.md, "Hot-key replicas", is the contract.
package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
)

// HotKey is a key of the shared hot set with its read rate over every
// serve process.
type HotKey struct {
	Tenant, Item string
	Rate         float64 // reads/s
}

// Deps are the Builder's connections.
type Deps struct {
	Cache *cache.Client
	// Hot returns the n hottest keys of the namespace, hottest first
	// (hotset.ReadFast; a function so the API can use the Reader without
	// depending on the hot set, which counts the API's reads).
	Hot        func(ctx context.Context, n int) ([]HotKey, error)
	Log        *slog.Logger
	Registerer prometheus.Registerer // nil: metrics kept, not exposed
}

// Builder keeps copy sets of hot keys published.
type Builder struct {
	cfg Config
	c   *cache.Client
	hot func(ctx context.Context, n int) ([]HotKey, error)
	log *slog.Logger
	m   *metrics
}

// New checks cfg and builds a Builder.
func New(cfg Config, deps Deps) (*Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Cache == nil || deps.Hot == nil {
		return nil, errors.New("replica: Cache and Hot are required")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, fmt.Errorf("replica: metrics: %w", err)
	}
	return &Builder{cfg: cfg, c: deps.Cache, hot: deps.Hot, log: log.With("component", "replica"), m: m}, nil
}

// Run makes a pass every Interval until ctx ends. With Threshold 0 it only
// waits: building is off.
func (b *Builder) Run(ctx context.Context) error {
	if b.cfg.Threshold == 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(b.cfg.Interval)
	defer t.Stop()
	for {
		if err := b.Pass(ctx); err != nil && ctx.Err() == nil {
			// The hot set or Redis is unavailable: copies expire by
			// themselves and readers fall back to the primary.
			b.log.Warn("replica pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass checks the hottest keys once and (re)builds the sets that need it.
func (b *Builder) Pass(ctx context.Context) error {
	top, err := b.hot(ctx, b.cfg.MaxKeys)
	if err != nil {
		return fmt.Errorf("replica: hot set: %w", err)
	}
	live := 0
	for _, h := range top {
		if h.Rate < b.cfg.Threshold {
			break // hottest first
		}
		ok, err := b.Ensure(ctx, h.Tenant, h.Item, b.cfg.Copies(h.Rate))
		if err != nil {
			b.log.Debug("replica build failed", "tenant", h.Tenant, "item", h.Item, "err", err)
		}
		if ok {
			live++
		}
	}
	b.m.hotKeys.Set(float64(live))
	return nil
}

// Ensure makes sure (tenant, item) has a published set that stays servable
// for at least RenewBefore, building n copies if not. It reports whether a
// set is published now; a key with no fresh value to copy (absent, stale,
// invalidated) is not an error: its readers use the primary.
func (b *Builder) Ensure(ctx context.Context, tenant, item string, n int) (bool, error) {
	snap, err := b.c.ReplicaSource(ctx, tenant, item, 2*b.cfg.Interval, b.cfg.RenewBefore)
	if err != nil {
		b.m.buildErrors.Inc()
		return false, err
	}
	switch snap.Status {
	case "current":
		return true, nil
	case "busy": // another process is building it
		return false, nil
	case "none":
		return false, nil
	}
	if _, err := b.c.BuildReplicas(ctx, tenant, item, snap.Entry, n); err != nil {
		b.m.buildErrors.Inc()
		return false, err
	}
	b.m.switches.Inc()
	return true, nil
}
