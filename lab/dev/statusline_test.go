package dev

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/status"
)

// TestQuantileInterpolatesWithinBuckets: the status line's quantiles follow
// the samples, not the bucket bounds (20, 50, 100 ms) they fall between.
func TestQuantileInterpolatesWithinBuckets(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "tidemark_applier_commit_to_apply_seconds",
		Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1},
	})
	reg.MustRegister(h)
	src := &statsSource{gather: reg}
	for i := range 100 { // 1 ms apart from 1 ms: the true p50 is ~50 ms
		h.Observe(float64(i+1) / 1000)
	}
	prev := src.snapshot()
	for i := range 1000 { // uniform over 20..50 ms: p50 35 ms, p99 49.7 ms
		h.Observe(0.020 + float64(i)*0.00003 + 0.000001)
	}
	cur := src.snapshot()
	for _, c := range []struct{ q, lo, hi float64 }{{.5, .0340, .0360}, {.99, .0490, .0500}, {.1, .0220, .0240}} {
		got := status.Quantile(c.q, prev.commitApply, cur.commitApply)
		if got < c.lo || got > c.hi {
			t.Errorf("quantile(%v) over the window = %.4fs, want within [%.4f, %.4f] (samples uniform over 20..50 ms)", c.q, got, c.lo, c.hi)
		}
	}
	if got := status.Quantile(.99, cur.commitApply, cur.commitApply); !math.IsNaN(got) {
		t.Errorf("quantile with no samples = %v, want NaN", got)
	}
	h.Observe(5) // above the last finite bound
	if got := status.Quantile(1, cur.commitApply, src.snapshot().commitApply); got != 1 {
		t.Errorf("quantile above the last bound = %v, want the last finite bound, 1", got)
	}
}
