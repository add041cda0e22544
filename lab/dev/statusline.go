package dev

import (
	"context"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/status"
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
	commitApply status.Histogram
}

func (s *statsSource) snapshot() snapshot {
	snap := snapshot{at: time.Now()}
	mfs, _ := s.gather.Gather()
	for _, mf := range mfs {
		switch mf.GetName() {
		case "tidemark_api_source_reads_total":
			for _, m := range mf.GetMetric() {
				snap.sourceReads += m.GetCounter().GetValue()
			}
		case "tidemark_applier_commit_to_apply_seconds":
			for _, m := range mf.GetMetric() {
				snap.commitApply.Add(m.GetHistogram())
			}
		}
	}
	return snap
}

// p99 between two snapshots (the status page's interpolation); NaN without
// samples.
func p99(prev, cur snapshot) float64 { return status.Quantile(0.99, prev.commitApply, cur.commitApply) }

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
		line += fmt.Sprintf("p99 commit->apply (10s) %s | watermark age %s | source reads/s %5.1f",
			fmtSeconds(p99(window[0], cur)), watermarkAge(s.p.stats.cache.Watermark()), (cur.sourceReads-prev.sourceReads)/secs)
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
	case s < 1:
		return fmt.Sprintf("%.0fms", s*1000)
	}
	return fmt.Sprintf("%.1fs", s)
}
