package main

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tidemark/internal/clockguard"
)

// newClockGuard builds the process's clock guard; the test-only
// TIDEMARK_TEST_CLOCK_OFFSET shifts its wall clock. pg may be nil.
func newClockGuard(rdb redis.UniversalClient, pg clockguard.Querier, log *slog.Logger, reg prometheus.Registerer) (*clockguard.Guard, error) {
	cfg := clockguard.DefaultConfig()
	off, err := clockguard.TestOffsetFromEnv()
	if err != nil {
		return nil, usageError(err)
	}
	cfg.TestOffset = off
	deps := clockguard.Deps{Redis: rdb, Log: log, Registerer: reg}
	if pg != nil {
		deps.Postgres = pg
	}
	return clockguard.New(cfg, deps)
}

// guardedStage runs a stage with the clock guard beside it: /readyz fails
// while either is not ready.
type guardedStage struct {
	stage
	clock *clockguard.Guard
}

func (g guardedStage) Run(ctx context.Context) error {
	cctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); g.clock.Run(cctx) }()
	err := g.stage.Run(ctx)
	stop()
	wg.Wait()
	return err
}

func (g guardedStage) Ready(ctx context.Context) error {
	return errors.Join(g.clock.Ready(ctx), g.stage.Ready(ctx))
}
