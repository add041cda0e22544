package clockguard_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/clockguard"
	"tidemark/internal/testenv"
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
		if d := g.Now().Sub(time.Now()); d < -50*time.Millisecond || d > 50*time.Millisecond {
			t.Fatalf("offset %s: Now is %s from the real clock", tc.offset, d)
		}
		if d := g.Wall().Sub(time.Now()) - tc.offset; d < -50*time.Millisecond || d > 50*time.Millisecond {
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
