package testenv

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/internal/clockguard"
)

// Clock is a process's guarded clock against rdb (and pg, when not nil),
// measured once and run until the test ends: what a serve process gives
// its API (api.Deps.Clock).
func Clock(t testing.TB, rdb redis.UniversalClient, pg clockguard.Querier) *clockguard.Guard {
	t.Helper()
	deps := clockguard.Deps{Redis: rdb, Log: Logger(t)}
	if pg != nil {
		deps.Postgres = pg
	}
	g, err := clockguard.New(clockguard.DefaultConfig(), deps)
	if err != nil {
		t.Fatal(err)
	}
	_ = g.Check(context.Background()) // the outcome is kept in g
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return g
}
