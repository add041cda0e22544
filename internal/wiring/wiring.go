// Package wiring builds the object graph of each tidemark process role
// (capture, apply, serve) onto one lifecycle.Group, in the phases the group
// stops them in. cmd/tidemark's capture, apply and serve commands and
// `tidemark-lab dev` (all three roles in one process) call the same functions, so
// dev runs what the stand-alone processes run: the same parts, the same
// checks, the same shutdown order.
package wiring

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/internal/clockguard"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/replica"
	"github.com/tidemark/tidemark/warm"
)

// Group is where the parts are added: a *lifecycle.Group, or a wrapper of
// one (dev treats a part that ends by itself as a failure).
type Group interface {
	Add(phase lifecycle.Phase, name string, run func(context.Context) error)
}

// Tier is a process's connection to the cache tier, shared by every role it
// runs: one Redis client, one cache client (whose watermark poller runs once)
// and one clock guard.
type Tier struct {
	Redis redis.UniversalClient
	Cache *cache.Client
	Clock *clockguard.Guard
	log   *slog.Logger
}

// OpenTier connects to the cache tier (cache.OpenRedis) and
// builds the cache client and the clock guard; pg, when not nil, is a second
// clock reference. The test-only TIDEMARK_TEST_CLOCK_OFFSET shifts the
// guard's wall clock. Close the Tier when the group has returned.
func OpenTier(rc cache.RedisConfig, cfg cache.Config, pg clockguard.Querier, log *slog.Logger, reg prometheus.Registerer) (*Tier, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rdb, err := cache.OpenRedis(rc, log)
	if err != nil {
		return nil, err
	}
	cc, err := cache.New(cfg, cache.Deps{Redis: rdb, Log: log, Registerer: reg})
	if err != nil {
		rdb.Close()
		return nil, err
	}
	ccfg := clockguard.DefaultConfig()
	if ccfg.TestOffset, err = clockguard.TestOffsetFromEnv(); err != nil {
		rdb.Close()
		return nil, err
	}
	deps := clockguard.Deps{Redis: rdb, Log: log, Registerer: reg}
	if pg != nil {
		deps.Postgres = pg
	}
	clock, err := clockguard.New(ccfg, deps)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	return &Tier{Redis: rdb, Cache: cc, Clock: clock, log: log}, nil
}

// Add runs the tier's background parts (the watermark poller and the clock
// guard) in the Cache phase: they outlive every role that uses them.
func (t *Tier) Add(g Group) {
	g.Add(lifecycle.Cache, "cache", t.Cache.Run)
	g.Add(lifecycle.Cache, "clock guard", t.Clock.Run)
}

// CheckEvictionPolicy refuses an allkeys-* maxmemory-policy (it may evict the
// watermark hash; cache.Config.AllowAllKeysEviction overrides). A tier that
// cannot be asked now is logged and let through: serve's reads fall back to
// the source, and the applier checks again when it starts. A Redis user
// refused INFO (NOPERM) is refused: that does not mend itself.
func (t *Tier) CheckEvictionPolicy(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := t.Cache.CheckEvictionPolicy(pctx)
	if cache.IsNoPerm(err) {
		return fmt.Errorf("%w (the Redis user lacks a rule of the README's Redis ACL line)", err)
	}
	if err != nil && !errors.Is(err, cache.ErrEvictionPolicy) {
		t.log.Warn("cannot read the cache tier's maxmemory-policy; starting anyway", "err", err)
		return nil
	}
	return err
}

// Close closes the Redis client.
func (t *Tier) Close() error { return t.Redis.Close() }

// AddCapture builds capture and adds it in the Capture phase. tp (nil:
// none) receives the traces of sampled changes.
func AddCapture(g Group, cfg capture.Config, log *slog.Logger, reg prometheus.Registerer, tp trace.TracerProvider) (*capture.Capture, error) {
	c, err := capture.New(cfg, capture.Deps{Log: log, Registerer: reg, Tracer: tp})
	if err != nil {
		return nil, err
	}
	g.Add(lifecycle.Capture, "capture", c.Run)
	return c, nil
}

// AddApply builds the group applier on the tier and adds it in the Apply
// phase; tp (nil: none) continues sampled changes' traces.
func AddApply(g Group, cfg applier.Config, t *Tier, log *slog.Logger, reg prometheus.Registerer, tp trace.TracerProvider) (*applier.Applier, error) {
	a, err := applier.New(cfg, applier.Deps{Cache: t.Cache, Log: log, Registerer: reg, Tracer: tp})
	if err != nil {
		return nil, err
	}
	g.Add(lifecycle.Apply, "applier", a.Run)
	return a, nil
}

// Serve is the configuration of the serve role: the API and the parts that
// work on its behalf.
type Serve struct {
	API     api.Config
	Hot     hotset.Config
	Audit   audit.Config
	Warm    warm.Config
	Replica replica.Config
	// RunAudit and RunWarm say whether this process takes part in the
	// elections of the auditor and the warmer.
	RunAudit, RunWarm bool
}

// PaceWarm paces the warmer within the background budget it is charged to:
// from an eighth of it, an eighth more each healthy step, up to all of it.
func PaceWarm(c warm.Config, backgroundRate float64) warm.Config {
	c.MaxRate, c.StartRate, c.Step = backgroundRate, backgroundRate/8, backgroundRate/8
	return c
}

// AddServe checks the tier's eviction policy, measures the clock once (an
// unmeasured clock is not trusted, so the API would answer no read from the
// cache), builds the API (tp, nil: none, receives sampled GETs' spans) with
// the hot-set tracker counting its lookups, the auditor, the warmer and the
// replica builder, and adds them: the API and its helpers in the Requests
// phase, the hot-set merge in the Cache phase.
func AddServe(ctx context.Context, g Group, cfg Serve, t *Tier, pool *pgxpool.Pool, log *slog.Logger, reg prometheus.Registerer, tp trace.TracerProvider) (*api.Server, error) {
	if err := t.CheckEvictionPolicy(ctx); err != nil {
		return nil, err
	}
	hot, err := hotset.New(cfg.Hot, hotset.Deps{Redis: t.Redis, Log: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	_ = t.Clock.Check(ctx) // the first measurement; its outcome is kept in the guard
	srv, err := api.New(cfg.API, api.Deps{Pool: pool, Cache: Counted{Cache: t.Cache, T: hot}, Redis: t.Redis,
		Log: log, Registerer: reg, Clock: t.Clock, Tracer: tp})
	if err != nil {
		return nil, err
	}
	g.Add(lifecycle.Requests, "api", srv.Run)
	if cfg.RunAudit {
		aud, err := audit.New(cfg.Audit, audit.Deps{Redis: t.Redis, DB: pool, Cache: t.Cache, Budget: srv, Log: log, Registerer: reg})
		if err != nil {
			return nil, err
		}
		g.Add(lifecycle.Requests, "auditor", aud.Run)
	}
	if cfg.RunWarm {
		w, err := warm.New(cfg.Warm, warm.Deps{Redis: t.Redis, Cache: t.Cache, Source: srv, Log: log, Registerer: reg})
		if err != nil {
			return nil, err
		}
		g.Add(lifecycle.Requests, "warmer", w.Run)
	}
	reps, err := replica.New(cfg.Replica, replica.Deps{Cache: t.Cache, Hot: HotKeys(t.Redis, cfg.Hot.Namespace), Log: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	g.Add(lifecycle.Requests, "replica builder", reps.Run)
	g.Add(lifecycle.Cache, "hot set", hot.Run)
	return srv, nil
}
