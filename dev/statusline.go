package dev

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"tidemark/cache"
)

// statsSource reads the process's own metrics, so the status line shows
// exactly what /metrics exports.
type statsSource struct {
	gather prometheus.Gatherer
	cache  *cache.Client
}

// snapshot is the cumulative values the status line differentiates.
type snapshot struct {
	at          time.Time
	sourceReads float64
	buckets     map[float64]float64 // commit-to-apply upper bound -> cumulative count
	count       float64
}

func (s *statsSource) snapshot() snapshot {
	snap := snapshot{at: time.Now(), buckets: map[float64]float64{}}
	mfs, _ := s.gather.Gather()
	for _, mf := range mfs {
		switch mf.GetName() {
		case "tidemark_api_source_reads_total":
			for _, m := range mf.GetMetric() {
				snap.sourceReads += m.GetCounter().GetValue()
			}
		case "tidemark_applier_commit_to_apply_seconds":
			for _, m := range mf.GetMetric() {
				addHistogram(&snap, m.GetHistogram())
			}
		}
	}
	return snap
}

func addHistogram(s *snapshot, h *dto.Histogram) {
	s.count += float64(h.GetSampleCount())
	for _, b := range h.GetBucket() {
		s.buckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
	}
}

// quantile q of the samples between two snapshots, interpolated linearly
// within the bucket that holds it (as PromQL's histogram_quantile does), so
// the line moves with the distribution instead of jumping between bucket
// bounds; NaN without samples, +Inf when it lies above the last finite bound.
func quantile(q float64, prev, cur snapshot) float64 {
	n := cur.count - prev.count
	if n <= 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(cur.buckets))
	for b := range cur.buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	rank := q * n
	lower, below := 0.0, 0.0 // the previous bound and the samples at or under it
	for _, b := range bounds {
		c := cur.buckets[b] - prev.buckets[b]
		if c >= rank {
			if math.IsInf(b, 1) {
				return math.Inf(1)
			}
			if c == below {
				return b
			}
			return lower + (b-lower)*(rank-below)/(c-below)
		}
		lower, below = b, c
	}
	return math.Inf(1)
}

type statusLine struct {
	out  io.Writer
	term bool
	p    *pipeline
	load *loadGen
}

func newStatusLine(out io.Writer, term bool, p *pipeline, load *loadGen) *statusLine {
	return &statusLine{out: out, term: term, p: p, load: load}
}

// run redraws the line every second on a terminal, and prints it every 10 s
// otherwise (logs stay readable).
func (s *statusLine) run(ctx context.Context) {
	every := time.Second
	if !s.term {
		every = 10 * time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	prev := s.p.stats.snapshot()
	// Latency percentiles over the last 10 s: one second holds too few
	// samples at demo rates for a p99 to mean anything.
	window := []snapshot{prev}
	var pr, pu, ph int64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur := s.p.stats.snapshot()
		secs := cur.at.Sub(prev.at).Seconds()
		line := ""
		if s.load != nil {
			r, u, h := s.load.reads.Load(), s.load.upds.Load(), s.load.hits.Load()
			hit := math.NaN()
			if r > pr {
				hit = 100 * float64(h-ph) / float64(r-pr)
			}
			line += fmt.Sprintf("updates/s %5.0f | reads/s %6.0f | hit %5.1f%% | ", float64(u-pu)/secs, float64(r-pr)/secs, hit)
			pr, pu, ph = r, u, h
		}
		line += fmt.Sprintf("commit->apply (10s) p50 %s p99 %s | watermark age %s | source reads/s %5.1f",
			fmtSeconds(quantile(.5, window[0], cur)), fmtSeconds(quantile(.99, window[0], cur)), watermarkAge(s.p.stats.cache.Watermark()), (cur.sourceReads-prev.sourceReads)/secs)
		prev = cur
		if window = append(window, cur); cur.at.Sub(window[0].at) > 10*time.Second {
			window = window[1:]
		}
		if s.term {
			fmt.Fprintf(s.out, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(s.out, line)
		}
	}
}

func watermarkAge(w cache.Watermark) string {
	if !w.Known {
		return "unknown"
	}
	return fmtSeconds(time.Since(w.W).Seconds())
}

func fmtSeconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "-"
	case math.IsInf(s, 1):
		return ">max"
	case s < 0.01:
		return fmt.Sprintf("%.1fms", s*1000)
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return fmt.Sprintf("%.1fs", s)
}
