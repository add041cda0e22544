package chaos

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// sample is one second of the run as the observer saw it: the watermark age
// read from the cache tier, source reads the serve processes counted, and
// the commit-to-apply latencies the appliers recorded meanwhile. These feed
// the report only; the verdict comes from the checker.
type sample struct {
	At             time.Time
	WMAge          time.Duration
	WMKnown        bool
	APISourceReads float64 // per second, as the serve processes counted them (for comparison with the source's own count)
	Interval       time.Duration
	C2A            []float64 // commit-to-apply observations per bucket (not cumulative) since the previous sample
	// APILat is the serve processes' own count of item reads by latency
	// bucket (tidemark_api_request_seconds, route get_item; not
	// cumulative) since the previous sample: the read SLO's latency from
	// the API's entry, beside the harness's own measure.
	APILat []float64
}

type srcScrape struct {
	total float64
	at    time.Time
}

// observer scrapes once a second.
type observer struct {
	sys    *system
	client *http.Client

	mu      sync.Mutex
	samples []sample

	src    *sourceCounter // nil: the source's reads are not sampled
	source []SourceSecond // what the source served, sample by sample

	bounds    []float64            // commit-to-apply bucket upper bounds
	prevHist  map[string][]uint64  // per applier endpoint, cumulative
	latBounds []float64            // API read latency bucket upper bounds
	prevLat   map[string][]uint64  // per serve endpoint, cumulative
	prevSrc   map[string]srcScrape // per serve endpoint
	prevAt    time.Time
}

func newObserver(sys *system, src *sourceCounter) *observer {
	return &observer{sys: sys, src: src, client: &http.Client{Timeout: 800 * time.Millisecond},
		prevHist: map[string][]uint64{}, prevSrc: map[string]srcScrape{}, prevLat: map[string][]uint64{}}
}

func (o *observer) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	o.prevAt = time.Now()
	for {
		o.observe(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (o *observer) scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

func (o *observer) observe(ctx context.Context) {
	now := time.Now()
	s := sample{At: now, Interval: now.Sub(o.prevAt)}
	o.prevAt = now
	if o.src != nil {
		if reads, at, iv, ok := o.src.sample(ctx); ok {
			o.mu.Lock()
			o.source = append(o.source, SourceSecond{At: at, Interval: Duration(iv), Reads: reads})
			o.mu.Unlock()
		}
	}
	if age, err := o.sys.watermarkAge(ctx); err == nil {
		s.WMAge, s.WMKnown = age, true
	}
	for _, u := range o.sys.serveMetrics {
		fams, err := o.scrape(ctx, u)
		if err != nil {
			continue // a killed or stopped serve process: its reads resume with the next scrape
		}
		var total float64
		if f := fams["tidemark_api_source_reads_total"]; f != nil {
			for _, m := range f.Metric {
				total += m.GetCounter().GetValue()
			}
		}
		// A rate per process over the time since its own previous scrape,
		// each timed when its answer arrived (not when the tick began: a
		// scrape delayed by a slow one before it would otherwise count more
		// than a second's reads as one second's): a process that missed
		// scrapes (stopped) or restarted (counter reset, unknown start) must
		// not look like a burst.
		at := time.Now()
		prev, seen := o.prevSrc[u]
		if seen && total >= prev.total {
			s.APISourceReads += (total - prev.total) / at.Sub(prev.at).Seconds()
		}
		o.prevSrc[u] = srcScrape{total, at}
		o.apiLatency(&s, u, fams)
	}
	for _, u := range o.sys.applyMetrics {
		fams, err := o.scrape(ctx, u)
		if err != nil {
			continue
		}
		f := fams["tidemark_applier_commit_to_apply_seconds"]
		if f == nil || len(f.Metric) == 0 {
			continue
		}
		h := f.Metric[0].GetHistogram()
		var bounds []float64
		var cur []uint64
		for _, b := range h.Bucket {
			if !math.IsInf(b.GetUpperBound(), 1) {
				bounds = append(bounds, b.GetUpperBound())
				cur = append(cur, b.GetCumulativeCount())
			}
		}
		cur = append(cur, h.GetSampleCount())
		if o.bounds == nil {
			o.bounds = bounds
		}
		if len(bounds) != len(o.bounds) {
			continue
		}
		prev := o.prevHist[u]
		if prev == nil || cur[len(cur)-1] < prev[len(prev)-1] {
			prev = make([]uint64, len(cur)) // first sight, or the process restarted
			if o.prevHist[u] == nil {
				o.prevHist[u] = cur
				continue // counts from before the run started are not ours
			}
		}
		if s.C2A == nil {
			s.C2A = make([]float64, len(cur))
		}
		var below uint64
		for i := range cur {
			d := cur[i] - prev[i]
			s.C2A[i] += float64(d - below)
			below = d
		}
		o.prevHist[u] = cur
	}
	o.mu.Lock()
	o.samples = append(o.samples, s)
	o.mu.Unlock()
}

// apiLatency adds one serve process's item reads by latency bucket since
// its previous scrape to s (nothing on its first scrape or after a restart,
// whose counts are not the interval's).
func (o *observer) apiLatency(s *sample, u string, fams map[string]*dto.MetricFamily) {
	f := fams["tidemark_api_request_seconds"]
	if f == nil {
		return
	}
	for _, m := range f.Metric {
		if !slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == "route" && l.GetValue() == "get_item" }) {
			continue
		}
		h := m.GetHistogram()
		var bounds []float64
		var cur []uint64
		for _, b := range h.Bucket {
			if !math.IsInf(b.GetUpperBound(), 1) {
				bounds = append(bounds, b.GetUpperBound())
				cur = append(cur, b.GetCumulativeCount())
			}
		}
		cur = append(cur, h.GetSampleCount())
		if o.latBounds == nil {
			o.latBounds = bounds
		}
		prev := o.prevLat[u]
		o.prevLat[u] = cur
		if !slices.Equal(bounds, o.latBounds) || prev == nil || cur[len(cur)-1] < prev[len(prev)-1] {
			return
		}
		if s.APILat == nil {
			s.APILat = make([]float64, len(cur))
		}
		var below uint64
		for i := range cur {
			d := cur[i] - prev[i]
			s.APILat[i] += float64(d - below)
			below = d
		}
	}
}

func (o *observer) all() []sample {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]sample(nil), o.samples...)
}

func (o *observer) sourceSeconds() []SourceSecond {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]SourceSecond(nil), o.source...)
}

// quantile of a bucketed distribution (counts per bucket, the last one
// unbounded), interpolated inside the bucket.
func quantile(bounds []float64, counts []float64, q float64) (float64, bool) {
	var total float64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0, false
	}
	want := q * total
	var cum float64
	for i, c := range counts {
		if cum+c >= want && c > 0 {
			if i >= len(bounds) {
				return math.Inf(1), true
			}
			lo := 0.0
			if i > 0 {
				lo = bounds[i-1]
			}
			return lo + (bounds[i]-lo)*(want-cum)/c, true
		}
		cum += c
	}
	return bounds[len(bounds)-1], true
}

// window is a span of the run during which a fault was in effect.
type window struct{ from, to time.Time }

func inAny(ws []window, t time.Time) bool {
	for _, w := range ws {
		if !t.Before(w.from) && !t.After(w.to) {
			return true
		}
	}
	return false
}

func (w window) String() string { return fmt.Sprintf("[%s, %s]", ts(w.from), ts(w.to)) }
