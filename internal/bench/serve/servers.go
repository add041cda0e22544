package serve

import (
	"context"
	"fmt"
	"os"
	"time"

	"tidemark/internal/localserver"
)

// benchServers are the private Postgres and Redis `tidemark bench serve`
// starts when it is not given --pg and --redis (internal/localserver runs
// them; the test helpers live in internal/testenv and are for tests only).
type benchServers struct {
	pg    *localserver.Postgres
	redis *localserver.Redis
	PGDSN string
	Redis string
}

func startBenchServers() (*benchServers, error) {
	b := &benchServers{}
	rdir, err := os.MkdirTemp("", "tidemark-bench-redis-")
	if err != nil {
		return nil, err
	}
	if b.redis, err = localserver.NewRedis(localserver.RedisConfig{Dir: rdir}); err != nil {
		os.RemoveAll(rdir)
		return nil, err
	}
	pdir, err := os.MkdirTemp("", "tidemark-bench-pg-")
	if err != nil {
		b.Stop()
		return nil, err
	}
	// pg_stat_statements is preloaded by localserver; the bench applies the
	// migrations itself.
	if b.pg, err = localserver.NewPostgres(localserver.PostgresConfig{Dir: pdir, Ephemeral: true}); err != nil {
		os.RemoveAll(pdir)
		b.Stop()
		return nil, err
	}
	b.PGDSN, b.Redis = b.pg.DSN("postgres"), b.redis.URL()
	return b, nil
}

// Stop stops the servers and removes their files.
func (b *benchServers) Stop() {
	if b.pg != nil {
		b.pg.Remove()
	}
	if b.redis != nil {
		b.redis.Remove()
	}
}

// waitFor calls f until it succeeds, limit passes or ctx ends.
func waitFor(ctx context.Context, limit time.Duration, f func(context.Context) error) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not ready after %s: %w", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
