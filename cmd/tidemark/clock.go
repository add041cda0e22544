package main

import (
	"log/slog"

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
