// Package clockguard keeps a process's clock honest. Cached values carry an
// absolute hard deadline computed from the filling host's clock, and Redis
// judges them by its own; the 30 s promise holds only while every host is
// within Bound (100 ms) of the others. A Guard measures this process's offset
// to Redis TIME (every master of a Cluster) and to Postgres clock_timestamp()
// every Interval, correcting for the round trip, and reports whether the
// clock can be trusted. A reading is only good to ± half its round trip, so
// one too slow to place the offset on either side of Bound decides nothing. A process whose clock is out of bounds must not answer
// from the cache; its /readyz fails until the offset is back within bounds.
//
// Test-only: the environment variable TIDEMARK_TEST_CLOCK_OFFSET (a Go
// duration such as "2s" or "-500ms") shifts the process's wall clock by that
// much, so tests and the chaos tool can run one process with a skewed clock.
// Never set it in production.
package clockguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/promise"
)

// EnvTestOffset is the test-only wall-clock shift (a Go duration).
const EnvTestOffset = "TIDEMARK_TEST_CLOCK_OFFSET"

// TestOffsetFromEnv reads EnvTestOffset; unset or empty is 0.
func TestOffsetFromEnv() (time.Duration, error) {
	v := os.Getenv(EnvTestOffset)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: %w", EnvTestOffset, v, err)
	}
	return d, nil
}

// Config says how the clock is checked.
type Config struct {
	Bound      time.Duration // largest tolerated offset to Redis or Postgres
	Interval   time.Duration // how often the offset is measured
	TestOffset time.Duration // test only: shift of this process's wall clock
}

// DefaultConfig: 100 ms bound, measured every 2 s.
func DefaultConfig() Config {
	return Config{Bound: promise.ClockBound, Interval: 2 * time.Second}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	p.Positive("Bound", c.Bound)
	p.Positive("Interval", c.Interval)
	return p.Err()
}

// Querier is the part of a pgx pool the Postgres measurement needs.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Deps are the servers the clock is compared with.
type Deps struct {
	Redis      redis.UniversalClient // required: the cache tier judges deadlines by its clock
	Postgres   Querier               // optional
	Log        *slog.Logger
	Registerer prometheus.Registerer
}

// Guard measures and reports the clock's offset. Wall and Now are safe for
// concurrent use.
type Guard struct {
	cfg   Config
	rdb   redis.UniversalClient
	pg    Querier
	log   *slog.Logger
	gauge *prometheus.GaugeVec

	offset  atomic.Int64 // wall - Redis, nanoseconds, of the last good measurement
	trusted atomic.Bool
	// measured is when the last conclusive measurement was taken, as
	// nanoseconds since start on the monotonic clock: Trusted runs on every
	// GET, so it reads two atomics and takes no lock (a wall-clock jump, the
	// thing this package watches for, cannot stretch the age either).
	start    time.Time
	measured atomic.Int64

	mu        sync.Mutex
	lastErr   error
	inEpisode bool // out of bounds, already logged
}

// New builds a Guard; it distrusts the clock until the first measurement.
func New(cfg Config, deps Deps) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("clockguard: %w", err)
	}
	if deps.Redis == nil {
		return nil, errors.New("clockguard: missing dependency Redis")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in := telemetry.NewInstruments(deps.Registerer)
	g := &Guard{cfg: cfg, rdb: deps.Redis, pg: deps.Postgres, log: log.With("component", "clockguard"), start: time.Now(),
		gauge: in.GaugeVec("tidemark_clock_offset_seconds",
			"This process's clock minus the reference's (redis: the largest over masters; postgres), round-trip corrected.",
			"reference")}
	if err := in.Err(); err != nil {
		return nil, fmt.Errorf("clockguard: metrics: %w", err)
	}
	if cfg.TestOffset != 0 {
		g.log.Warn("test-only clock offset in effect", "env", EnvTestOffset, "offset", cfg.TestOffset)
	}
	return g, nil
}

// Wall is this process's wall clock (shifted by the test-only offset).
func (g *Guard) Wall() time.Time { return time.Now().Add(g.cfg.TestOffset) }

// Now is the best estimate of the cache tier's clock: the wall clock minus
// the measured offset.
func (g *Guard) Now() time.Time { return g.Wall().Add(-time.Duration(g.offset.Load())) }

// Trusted reports whether a recent measurement found the clock within Bound
// of Redis and Postgres. It takes no lock: it is on every read's path.
func (g *Guard) Trusted() bool {
	if !g.trusted.Load() {
		return false
	}
	return time.Since(g.start)-time.Duration(g.measured.Load()) <= g.maxAge()
}

// maxAge is how long a measurement counts: a few missed rounds.
func (g *Guard) maxAge() time.Duration { return max(3*g.cfg.Interval, 10*time.Second) }

// Ready fails while the clock is not trusted (for /readyz).
func (g *Guard) Ready(context.Context) error {
	if g.Trusted() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lastErr != nil {
		return fmt.Errorf("clockguard: %w", g.lastErr)
	}
	return errors.New("clockguard: clock offset not measured yet")
}

// Run measures at once, then every Interval until ctx ends.
func (g *Guard) Run(ctx context.Context) error {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		_ = g.Check(ctx) // the outcome is kept in g (Err, the gauge)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// sample is one reference's offset and its uncertainty: the true offset lies
// within Offset ± Err (half the round trip of the reading kept).
type sample struct {
	Offset, Err time.Duration
	Ref         string
}

// surelyOut: even the most favourable reading of the interval is past bound.
func (s sample) surelyOut(bound time.Duration) bool { return abs(s.Offset)-s.Err > bound }

// surelyIn: even the least favourable reading of the interval is within bound.
func (s sample) surelyIn(bound time.Duration) bool { return abs(s.Offset)+s.Err <= bound }

// Check measures once and updates Trusted; the error says why the clock is
// not trusted (nil: trusted). A measurement whose round trip is too slow to
// tell (a loaded host or network) decides nothing: like a failed one, the
// last conclusive measurement stands until it ages out, so a slow reply can
// neither trip a good clock nor vouch for a bad one.
func (g *Guard) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(g.cfg.Interval, time.Second))
	defer cancel()
	rs, err := g.redisOffset(ctx)
	if err != nil {
		// Redis cannot be asked: the last measurement stands until it ages out.
		return g.inconclusive(err)
	}
	g.gauge.WithLabelValues("redis").Set(rs.Offset.Seconds())
	samples := []sample{rs}
	if g.pg != nil {
		if ps, err := measure(ctx, 3, g.Wall, g.pgTime); err == nil {
			ps.Ref = "postgres"
			g.gauge.WithLabelValues("postgres").Set(ps.Offset.Seconds())
			samples = append(samples, ps)
		}
	}
	var out, unsure *sample
	for i := range samples {
		switch s := &samples[i]; {
		case s.surelyOut(g.cfg.Bound):
			out = s
		case !s.surelyIn(g.cfg.Bound) && unsure == nil:
			unsure = s
		}
	}
	if out == nil && unsure != nil {
		return g.inconclusive(fmt.Errorf("clock offset %s to %s cannot be judged against %s: round trip %s",
			unsure.Offset, unsure.Ref, g.cfg.Bound, 2*unsure.Err))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// The age first, then the verdict: a reader that sees the new verdict
	// also sees the new age.
	g.offset.Store(int64(rs.Offset))
	g.measured.Store(int64(time.Since(g.start)))
	g.trusted.Store(out == nil)
	if out == nil {
		g.lastErr = nil
		if g.inEpisode {
			g.inEpisode = false
			g.log.Info("clock back within bounds; answering from the cache again", "offset", rs.Offset)
		}
		return nil
	}
	g.lastErr = fmt.Errorf("clock offset %s (± %s) to %s exceeds %s", out.Offset, out.Err, out.Ref, g.cfg.Bound)
	if !g.inEpisode {
		g.inEpisode = true
		g.log.Error("clock out of bounds; not answering from the cache", "offset", out.Offset, "uncertainty", out.Err, "reference", out.Ref, "bound", g.cfg.Bound)
	}
	return g.lastErr
}

// inconclusive records why this round decided nothing; Trusted keeps the
// last conclusive answer until it is older than maxAge.
func (g *Guard) inconclusive(err error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastErr = err
	return err
}

// redisOffset is the sample of the master whose offset is the largest by
// magnitude.
func (g *Guard) redisOffset(ctx context.Context) (sample, error) {
	one := func(ctx context.Context, c redis.Cmdable) (sample, error) {
		s, err := measure(ctx, 3, g.Wall, func(ctx context.Context) (time.Time, error) { return c.Time(ctx).Result() })
		s.Ref = "redis"
		return s, err
	}
	cc, ok := g.rdb.(*redis.ClusterClient)
	if !ok {
		s, err := one(ctx, g.rdb)
		if err != nil {
			return sample{}, fmt.Errorf("redis TIME: %w", err)
		}
		return s, nil
	}
	var mu sync.Mutex
	var worst sample
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		s, err := one(ctx, node)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		mu.Lock()
		if abs(s.Offset)+s.Err > abs(worst.Offset)+worst.Err {
			worst = s
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return sample{}, fmt.Errorf("redis TIME: %w", err)
	}
	return worst, nil
}

func (g *Guard) pgTime(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := g.pg.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t, err
}

// measure asks the reference n times and keeps the sample with the shortest
// round trip: offset = midpoint of the local send and receive times minus the
// reference's reading; an asymmetric delay costs at most half the trip, which
// is the sample's Err.
func measure(ctx context.Context, n int, wall func() time.Time, ref func(context.Context) (time.Time, error)) (sample, error) {
	var best sample
	bestRTT := time.Duration(math.MaxInt64)
	var lastErr error
	for range n {
		t0 := wall()
		r, err := ref(ctx)
		t1 := wall()
		if err != nil {
			lastErr = err
			continue
		}
		if rtt := t1.Sub(t0); rtt < bestRTT {
			bestRTT = rtt
			best = sample{Offset: t0.Add(rtt / 2).Sub(r), Err: rtt / 2}
		}
	}
	if bestRTT == time.Duration(math.MaxInt64) {
		return sample{}, lastErr
	}
	return best, nil
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
