package status

import (
	"math"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Sample is one point of the status page's plot. NaN: not known then (the
// process does not export the series, or the watermark was unknown).
type Sample struct {
	At              time.Time
	WatermarkAgeS   float64
	OldestPendingS  float64
	CommitApplyP99S float64
}

// ring keeps the newest samples in a fixed-size buffer, so the page's
// memory does not grow with uptime.
type ring struct {
	buf  []Sample
	next int
	full bool
}

func newRing(n int) *ring { return &ring{buf: make([]Sample, n)} }

func (r *ring) add(s Sample) {
	r.buf[r.next] = s
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

// samples returns the kept samples, oldest first.
func (r *ring) samples() []Sample {
	if !r.full {
		return append([]Sample(nil), r.buf[:r.next]...)
	}
	return append(append([]Sample(nil), r.buf[r.next:]...), r.buf[:r.next]...)
}

// Histogram is a cumulative histogram read from a registry (the sum over
// its series), for quantiles between two reads.
type Histogram struct {
	At      time.Time
	Count   float64
	Buckets map[float64]float64 // upper bound -> cumulative count
}

// Add adds one series' buckets.
func (h *Histogram) Add(m *dto.Histogram) {
	if h.Buckets == nil {
		h.Buckets = map[float64]float64{}
	}
	h.Count += float64(m.GetSampleCount())
	for _, b := range m.GetBucket() {
		h.Buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
	}
}

// localMetrics is what one gather of the process's own registry yields.
type localMetrics struct {
	watermarkAge  float64 // max over series; NaN when absent
	oldestPending float64
	commitApply   Histogram
}

func gatherLocal(g prometheus.Gatherer, now time.Time) localMetrics {
	lm := localMetrics{watermarkAge: math.NaN(), oldestPending: math.NaN(),
		commitApply: Histogram{At: now}}
	if g == nil {
		return lm
	}
	mfs, _ := g.Gather() // a partial gather still carries the series that worked
	for _, mf := range mfs {
		switch mf.GetName() {
		case "tidemark_watermark_age_seconds":
			lm.watermarkAge = maxGauge(mf)
		case "tidemark_oldest_pending_event_age_seconds":
			lm.oldestPending = maxGauge(mf)
		case "tidemark_applier_commit_to_apply_seconds":
			for _, m := range mf.GetMetric() {
				lm.commitApply.Add(m.GetHistogram())
			}
		}
	}
	return lm
}

func maxGauge(mf *dto.MetricFamily) float64 {
	v := math.NaN()
	for _, m := range mf.GetMetric() {
		if g := m.GetGauge().GetValue(); math.IsNaN(v) || g > v {
			v = g
		}
	}
	return v
}

// Quantile of the observations between two reads, interpolated linearly
// inside the bucket that holds it (as Prometheus's histogram_quantile does);
// NaN without observations.
func Quantile(q float64, prev, cur Histogram) float64 {
	n := cur.Count - prev.Count
	if n <= 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(cur.Buckets))
	for b := range cur.Buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * n
	lower, below := 0.0, 0.0
	for _, b := range bounds {
		in := cur.Buckets[b] - prev.Buckets[b]
		if in >= rank {
			if math.IsInf(b, 1) {
				return lower // beyond the largest bucket: its bound is all we know
			}
			if in == below {
				return b
			}
			return lower + (b-lower)*(rank-below)/(in-below)
		}
		lower, below = b, in
	}
	return lower
}
