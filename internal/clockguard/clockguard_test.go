package clockguard_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/internal/clockguard"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The guard measures the test-only offset against Redis and Postgres, exports
// it, and distrusts the clock past the bound; a clock within the bound is
// trusted and Now tracks Redis's clock.
func TestGuardMeasuresOffset(t *testing.T) {
	r := testenv.StartRedis(t)
	pg := testenv.SharedPostgres(t)
	conn := pg.Connect(t, "postgres")
	for _, tc := range []struct {
		offset  time.Duration
		trusted bool
	}{{0, true}, {2 * time.Second, false}, {-300 * time.Millisecond, false}} {
		reg := prometheus.NewRegistry()
		cfg := clockguard.DefaultConfig()
		cfg.TestOffset = tc.offset
		g, err := clockguard.New(cfg, clockguard.Deps{Redis: r.Client(t), Postgres: conn, Log: testenv.Logger(t), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		if g.Trusted() || g.Ready(context.Background()) == nil {
			t.Fatalf("offset %s: trusted before any measurement", tc.offset)
		}
		err = g.Check(context.Background())
		if g.Trusted() != tc.trusted || (err == nil) != tc.trusted || (g.Ready(context.Background()) == nil) != tc.trusted {
			t.Fatalf("offset %s: trusted %v, Check %v, want trusted %v", tc.offset, g.Trusted(), err, tc.trusted)
		}
		for _, ref := range []string{"redis", "postgres"} {
			got := gaugeOf(t, reg, ref)
			if d := time.Duration(got*float64(time.Second)) - tc.offset; d < -50*time.Millisecond || d > 50*time.Millisecond {
				t.Fatalf("offset %s: %s gauge %.3fs", tc.offset, ref, got)
			}
		}
		if d := time.Until(g.Now()); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("offset %s: Now is %s from the real clock", tc.offset, d)
		}
		if d := time.Until(g.Wall()) - tc.offset; d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("offset %s: Wall is off by %s", tc.offset, d)
		}
	}
}

// gaugeOf is the offset gauge's value for ref; a missing series fails.
func gaugeOf(t *testing.T, reg *prometheus.Registry, ref string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tidemark_clock_offset_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reference" && l.GetValue() == ref {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no tidemark_clock_offset_seconds{reference=%q}", ref)
	return 0
}

func TestOffsetFromEnv(t *testing.T) {
	t.Setenv(clockguard.EnvTestOffset, "-500ms")
	if d, err := clockguard.TestOffsetFromEnv(); err != nil || d != -500*time.Millisecond {
		t.Fatalf("got %s %v", d, err)
	}
	t.Setenv(clockguard.EnvTestOffset, "two seconds")
	if _, err := clockguard.TestOffsetFromEnv(); err == nil {
		t.Fatal("a malformed offset was accepted")
	}
}

// delayTime holds every TIME command back for delay before it is sent, as a
// loaded host or a slow network would: the reply then reads the reference's
// clock late in the round trip, so the midpoint rule is off by up to half of
// it.
type delayTime struct{ delay atomic.Int64 }

func (h *delayTime) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *delayTime) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *delayTime) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "time" {
			time.Sleep(time.Duration(h.delay.Load()))
		}
		return next(ctx, cmd)
	}
}

// A reading too slow to tell (round trip past twice the bound) neither trips
// a good clock nor vouches for one: the last conclusive measurement stands
// until it ages out. A clock far enough off is still caught through the same
// slow round trips.
func TestSlowRoundTripIsInconclusive(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	hook := &delayTime{}
	rdb.AddHook(hook)
	cfg := clockguard.DefaultConfig()
	g, err := clockguard.New(cfg, clockguard.Deps{Redis: rdb, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(context.Background()); err != nil || !g.Trusted() {
		t.Fatalf("fast round trip, no offset: trusted %v, %v", g.Trusted(), err)
	}
	hook.delay.Store(int64(600 * time.Millisecond)) // the midpoint rule would read about -300ms
	measured := time.Now()
	err = g.Check(context.Background())
	if err == nil || !g.Trusted() {
		t.Fatalf("a slow reading decided: trusted %v, Check %v; want still trusted and an inconclusive error", g.Trusted(), err)
	}
	t.Logf("slow round: %v", err)
	testenv.Eventually(t, 30*time.Second, "the last conclusive measurement ages out", func() error {
		_ = g.Check(context.Background()) // the verdict is read from Trusted
		if g.Trusted() {
			return fmt.Errorf("still trusted %s after the last conclusive measurement", time.Since(measured))
		}
		return nil
	})

	cfg.TestOffset = 3 * time.Second
	bad, err := clockguard.New(cfg, clockguard.Deps{Redis: rdb, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Check(context.Background()); err == nil || bad.Trusted() {
		t.Fatalf("3s off through 600ms round trips: trusted %v, Check %v", bad.Trusted(), err)
	}
}
