package chaos

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tidemark/tidemark/promise"
)

// The read SLO is the third thing a run judges, beside freshness and the
// source budget (docs/seeds: p99 ≤ 50 ms from the API's entry to its answer,
// 99.99 % of valid reads successful; a 404 for a missing item is a success,
// a 503 because the source is protected a failure). A cache that is lost
// may lower availability for a while, so the run splits its seconds into
// three windows judged apart:
//
//   - warm-up: from the start until the hit ratio first settles;
//   - fault and recovery: from a fault's injection until the system is back
//     (watermark fresh, hit ratio back, failures at their steady rate), one
//     window per fault, reported by fault kind;
//   - steady state: every other second. Only here is a missed p99 or
//     success rate a violation (KindSLO), and only in a run on the sparse
//     schedule (Config.Schedule), which leaves steady state between faults.
//
// Latency is measured by the harness, from the request leaving to the whole
// answer arriving: an upper bound of the API's entry-to-answer time that
// asks the API nothing.

// KindSLO: the read SLO missed in steady state (p99 latency or success),
// or a sparse run with too little steady state to judge it.
const KindSLO Kind = "read-slo"

// SLO is the read objective.
type SLO struct {
	P99     time.Duration // 99th percentile of answer latency
	Success float64       // share of reads answered successfully
}

// ReadSLO is the seed's catalog read SLO.
var ReadSLO = SLO{P99: 50 * time.Millisecond, Success: 0.9999}

// settleWindow is the span over which "settled" and "back" are judged: a
// few seconds, so one slow second does not decide, and enough reads that
// one failure at the seed's rate is inside the success target.
const settleWindow = 5

// minSteady is the least steady state a sparse run must leave to judge the
// SLO at all.
const minSteady = 30 * time.Second

// successful is the SLO's notion of success: an answer that says what the
// source holds (a value, not modified, not found, not yet at min_version).
// No answer, a 503 and any other error are failures: the load sends only
// valid requests.
func successful(status int) bool {
	switch status {
	case http.StatusOK, http.StatusNotModified, http.StatusNotFound, http.StatusPreconditionFailed:
		return true
	}
	return false
}

// hit reports whether the answer came from the cache tier (RFC 9211
// Cache-Status "hit").
func hit(cacheStatus string) bool { return strings.Contains(cacheStatus, "; hit") }

// Latency histogram: 0.25 ms buckets to 100 ms (the target is a bucket
// bound, so "p99 ≤ 50 ms" is judged exactly), 10 ms buckets to 2 s, 250 ms
// buckets to 10 s, then one overflow bucket.
const (
	latFine, latMid, latCoarse = 400, 190, 32
	latBuckets                 = latFine + latMid + latCoarse + 1
)

func latBucket(d time.Duration) int {
	switch {
	case d <= 0:
		return 0
	case d <= 100*time.Millisecond:
		return int((d - 1) / (250 * time.Microsecond))
	case d <= 2*time.Second:
		return latFine + int((d-100*time.Millisecond-1)/(10*time.Millisecond))
	case d <= 10*time.Second:
		return latFine + latMid + int((d-2*time.Second-1)/(250*time.Millisecond))
	}
	return latBuckets - 1
}

// latBound is bucket i's upper bound (the overflow bucket's: a minute).
func latBound(i int) time.Duration {
	switch {
	case i < latFine:
		return time.Duration(i+1) * 250 * time.Microsecond
	case i < latFine+latMid:
		return 100*time.Millisecond + time.Duration(i-latFine+1)*10*time.Millisecond
	case i < latBuckets-1:
		return 2*time.Second + time.Duration(i-latFine-latMid+1)*250*time.Millisecond
	}
	return time.Minute
}

// readSecond is one second of reads, by the second the answer arrived.
type readSecond struct {
	Reads, OK int64 // answers (a request with no answer too); successes
	// Hits and HitBase: cache hits among the load's own reads (the
	// cold-read burst is a fault's load, not the steady mix).
	Hits, HitBase int64
	Lat           []uint32 // latency histogram of the HTTP answers (latBuckets)
}

// readSeconds are a run's reads by second (unix seconds).
type readSeconds map[int64]*readSecond

func (rs readSeconds) add(a Answer) {
	sec := a.Received.Unix()
	s := rs[sec]
	if s == nil {
		s = &readSecond{Lat: make([]uint32, latBuckets)}
		rs[sec] = s
	}
	s.Reads++
	if successful(a.Status) {
		s.OK++
	}
	if a.Status != 0 {
		s.Lat[latBucket(a.Received.Sub(a.Sent))]++
	}
	if !a.Cold {
		s.HitBase++
		if hit(a.CacheStatus) {
			s.Hits++
		}
	}
}

// keyReads records, per cache key, the seconds it was read in (a bit per
// second from the first read of the run): how many keys a fault may have
// to refill is how many were read shortly before it.
type keyReads struct {
	base int64 // unix second of bit 0
	bits map[itemKey][]uint64
}

func (k *keyReads) add(a Answer) {
	sec := a.Sent.Unix()
	if k.bits == nil {
		k.base, k.bits = sec, map[itemKey][]uint64{}
	}
	i := sec - k.base
	if i < 0 {
		return
	}
	key := itemKey{a.Tenant, a.Item}
	b := k.bits[key]
	for int64(len(b)) <= i/64 {
		b = append(b, 0)
	}
	b[i/64] |= 1 << (i % 64)
	k.bits[key] = b
}

// before counts the keys read in the span seconds before at.
func (k *keyReads) before(at time.Time, span time.Duration) int {
	to := at.Unix() - k.base
	from := max(0, to-int64(span/time.Second))
	n := 0
	for _, b := range k.bits {
		for i := from; i < to; i++ {
			if i/64 < int64(len(b)) && b[i/64]&(1<<(i%64)) != 0 {
				n++
				break
			}
		}
	}
	return n
}

// readAgg sums seconds.
type readAgg struct {
	Seconds       int
	Reads, OK     int64
	Hits, HitBase int64
	Lat           []uint32
	APILat        []float64 // the serve processes' own count (sample.APILat)
}

// addAPI adds the serve processes' own latency counts of one second.
func (g *readAgg) addAPI(c []float64) {
	if c == nil {
		return
	}
	if g.APILat == nil {
		g.APILat = make([]float64, len(c))
	}
	for i, n := range c {
		if i < len(g.APILat) {
			g.APILat[i] += n
		}
	}
}

func (g *readAgg) add(s *readSecond) {
	g.Seconds++
	if s == nil {
		return
	}
	g.Reads += s.Reads
	g.OK += s.OK
	g.Hits += s.Hits
	g.HitBase += s.HitBase
	if g.Lat == nil {
		g.Lat = make([]uint32, latBuckets)
	}
	for i, n := range s.Lat {
		g.Lat[i] += n
	}
}

func (g *readAgg) success() float64 { return ratio(g.OK, g.Reads) }

func (g *readAgg) hitRatio() float64 { return ratio(g.Hits, g.HitBase) }

// quantile is the upper bound of the bucket holding the q-quantile (0: no
// answer).
func (g *readAgg) quantile(q float64) time.Duration {
	var total uint64
	for _, n := range g.Lat {
		total += uint64(n)
	}
	if total == 0 {
		return 0
	}
	want := uint64(q*float64(total) + 0.999999)
	var cum uint64
	for i, n := range g.Lat {
		if cum += uint64(n); cum >= want {
			return latBound(i)
		}
	}
	return latBound(latBuckets - 1)
}

// WindowFigures are the read SLO's figures over one window.
type WindowFigures struct {
	Length  Duration `json:"length"`
	Reads   int64    `json:"reads"`
	Success float64  `json:"success"`
	P50     Duration `json:"p50"`
	P99     Duration `json:"p99"`
	Max     Duration `json:"max"` // the bucket bound of the slowest answer
	Hit     float64  `json:"hit_ratio"`
	// The serve processes' own count of the same reads, from the API's
	// entry (its histogram's buckets): the p99 interpolated inside its
	// bucket, and the share answered within the SLO's p99 target.
	APIP99    Duration `json:"api_p99,omitempty"`
	APIWithin float64  `json:"api_within_target,omitempty"`
}

func (g *readAgg) figures(bounds []float64, target time.Duration) WindowFigures {
	f := WindowFigures{Length: Duration(time.Duration(g.Seconds) * time.Second), Reads: g.Reads, Success: g.success(),
		P50: Duration(g.quantile(0.5)), P99: Duration(g.quantile(0.99)), Hit: g.hitRatio()}
	for i := len(g.Lat) - 1; i >= 0; i-- {
		if g.Lat[i] > 0 {
			f.Max = Duration(latBound(i))
			break
		}
	}
	if q, ok := quantile(bounds, g.APILat, 0.99); ok {
		f.APIP99 = secs(q)
		var within, total float64
		for i, n := range g.APILat {
			total += n
			if i < len(bounds) && bounds[i] <= target.Seconds() {
				within += n
			}
		}
		f.APIWithin = within / total
	}
	return f
}

// SLOKindStat is one fault kind's fault-and-recovery windows.
type SLOKindStat struct {
	Count        int `json:"count"`
	NotRecovered int `json:"not_recovered"`
	// Window: injected until back, longest and mean; AfterLift: lifted
	// until back, longest and mean (what recovery alone took).
	WindowMax    Duration      `json:"window_max"`
	WindowMean   Duration      `json:"window_mean"`
	AfterLiftMax Duration      `json:"after_lift_max"`
	AfterLiftAvg Duration      `json:"after_lift_mean"`
	Figures      WindowFigures `json:"figures"` // over every second of this kind's windows
	// BudgetNeeds is the longest refill the budget itself requires of this
	// kind's faults (keys read in the hard lifetime before it ÷ spare
	// foreground budget): a recovery after the lift longer than this (and
	// settleWindow) is slower than the budget explains.
	BudgetNeeds Duration `json:"budget_needs,omitempty"`
	Slower      bool     `json:"slower_than_budget_needs,omitempty"`
}

// SLOReport is the read SLO judged over a run's three windows.
type SLOReport struct {
	Target    SLO    `json:"-"`
	TargetP99 string `json:"target_p99"`
	TargetOK  string `json:"target_success"`
	Judged    bool   `json:"judged"` // a sparse run: a miss in steady state is a violation
	// SteadyHit is the hit ratio the system settles at (the median over
	// settleWindow-second spans), and HitFloor the least that counts as
	// settled or back; FailCeil is the failure share that counts as the
	// steady rate.
	SteadyHit float64 `json:"steady_hit_ratio"`
	HitFloor  float64 `json:"settled_hit_ratio_floor"`
	FailCeil  float64 `json:"steady_failure_ceiling"`
	// SpareBudget is the foreground budget steady state left unused
	// (reads/s): what a refill after a fault can use.
	SpareBudget float64 `json:"spare_foreground_budget"`

	WarmUp   WindowFigures          `json:"warm_up"`
	Steady   WindowFigures          `json:"steady_state"`
	Recovery map[string]SLOKindStat `json:"fault_and_recovery_by_kind"`
	Misses   []string               `json:"misses,omitempty"` // each one a KindSLO violation when Judged
}

// sloInput is what the judgment needs, so tests can give it a recorded or
// synthetic history without a server: reads by second, watermark samples,
// the faults, and the run's span.
type sloInput struct {
	Reads     readSeconds
	Samples   []sample
	Faults    []FaultRecord // Back is filled in
	LatBounds []float64     // the bucket bounds of the samples' APILat
	// Keys, Source and Foreground give each fault the time the budget
	// itself needs to refill the cache: the keys read in the hard
	// lifetime before it, over the foreground budget steady state left
	// spare (Foreground less its foreground reads a second, as the source
	// counted them).
	Keys       *keyReads
	Source     []SourceSecond
	Foreground float64
	Start, End time.Time
	Target     SLO
	Judged     bool
}

// judgeSLO splits the run into warm-up, fault-and-recovery and steady
// state, fills each fault's Back, and judges steady state.
func judgeSLO(in sloInput) *SLOReport {
	r := &SLOReport{Target: in.Target, Judged: in.Judged, TargetP99: in.Target.P99.String(),
		TargetOK: fmt.Sprintf("%.4g%%", 100*in.Target.Success), Recovery: map[string]SLOKindStat{}}
	first, last := in.Start.Unix()+1, in.End.Unix()-1 // whole seconds only
	if last < first {
		return r
	}
	// The steady levels: medians over settleWindow-second spans, which
	// holds while most of a sparse run is steady state.
	var hits, fails []float64
	for s := first; s+settleWindow-1 <= last; s += settleWindow {
		g := in.span(s, s+settleWindow)
		if g.HitBase > 0 {
			hits = append(hits, g.hitRatio())
		}
		if g.Reads > 0 {
			fails = append(fails, 1-g.success())
		}
	}
	r.SteadyHit = median(hits)
	r.HitFloor = r.SteadyHit - max(0.01, (1-r.SteadyHit)/2)
	r.FailCeil = max(2*median(fails), 1-in.Target.Success)

	// Warm-up: until the first span whose hit ratio is at the floor, or the
	// first fault, whichever comes first.
	warmEnd := last + 1
	for s := first; s+settleWindow-1 <= last; s++ {
		if in.settled(r, s) {
			warmEnd = s
			break
		}
	}
	for _, f := range in.Faults {
		warmEnd = min(warmEnd, max(first, f.Injected.Unix()))
	}

	// Each fault's window: injected until back, back being the first
	// second after the lift from which a settleWindow-second span has a
	// fresh watermark all along, the hit ratio at its floor and failures
	// at their steady rate.
	api := map[int64][]float64{}
	for _, x := range in.Samples {
		if x.APILat != nil {
			api[x.At.Unix()] = x.APILat
		}
	}
	inFault := map[int64]bool{}
	sums, lifts := map[string]time.Duration{}, map[string]time.Duration{}
	aggs := map[string]*readAgg{}
	for i := range in.Faults {
		f := &in.Faults[i]
		f.Back = time.Time{}
		for s := max(first, f.Lifted.Unix()+1); s+settleWindow-1 <= last; s++ {
			if in.back(r, s) {
				f.Back = time.Unix(s, 0)
				break
			}
		}
		to := last + 1
		if !f.Back.IsZero() {
			to = f.Back.Unix()
		}
		st := r.Recovery[f.Kind]
		st.Count++
		g := aggs[f.Kind]
		if g == nil {
			g = &readAgg{}
			aggs[f.Kind] = g
		}
		for s := max(first, f.Injected.Unix()); s < to; s++ {
			inFault[s] = true
			g.add(in.Reads[s])
			g.addAPI(api[s])
		}
		if f.Back.IsZero() {
			st.NotRecovered++
		} else {
			w, l := f.Back.Sub(f.Injected), max(0, f.Back.Sub(f.Lifted))
			sums[f.Kind] += w
			lifts[f.Kind] += l
			st.WindowMax, st.AfterLiftMax = max(st.WindowMax, Duration(w)), max(st.AfterLiftMax, Duration(l))
		}
		r.Recovery[f.Kind] = st
	}
	for k, st := range r.Recovery {
		if n := st.Count - st.NotRecovered; n > 0 {
			st.WindowMean, st.AfterLiftAvg = Duration(sums[k]/time.Duration(n)), Duration(lifts[k]/time.Duration(n))
		}
		st.Figures = aggs[k].figures(in.LatBounds, in.Target.P99)
		r.Recovery[k] = st
	}

	var warm, steady readAgg
	for s := first; s <= last; s++ {
		switch {
		case s < warmEnd && !inFault[s]:
			warm.add(in.Reads[s])
			warm.addAPI(api[s])
		case !inFault[s]:
			steady.add(in.Reads[s])
			steady.addAPI(api[s])
		}
	}
	r.WarmUp, r.Steady = warm.figures(in.LatBounds, in.Target.P99), steady.figures(in.LatBounds, in.Target.P99)
	in.budgetNeeds(r, warmEnd, inFault)
	switch {
	case time.Duration(r.Steady.Length) < minSteady:
		r.Misses = append(r.Misses, fmt.Sprintf("steady state lasted %s, less than the %s needed to judge the SLO (faults closer than their recoveries?)",
			time.Duration(r.Steady.Length), minSteady))
	default:
		if p := time.Duration(r.Steady.P99); p > in.Target.P99 {
			r.Misses = append(r.Misses, fmt.Sprintf("steady-state p99 %s above %s", p, in.Target.P99))
		}
		if r.Steady.Success < in.Target.Success-1e-9 { // at the target is inside it, whatever the rounding

			r.Misses = append(r.Misses, fmt.Sprintf("steady-state success %.4f%% below %.4g%% (%d of %d reads failed)",
				100*r.Steady.Success, 100*in.Target.Success, steady.Reads-steady.OK, steady.Reads))
		}
	}
	return r
}

// budgetNeeds fills SpareBudget and each kind's BudgetNeeds and Slower.
func (in *sloInput) budgetNeeds(r *SLOReport, warmEnd int64, inFault map[int64]bool) {
	if in.Keys == nil || in.Foreground <= 0 {
		return
	}
	var reads, secs float64
	for _, x := range in.Source {
		if s := x.At.Unix(); s >= warmEnd && !inFault[s] && x.Interval > 0 {
			reads += x.Reads[ClassForeground]
			secs += time.Duration(x.Interval).Seconds()
		}
	}
	r.SpareBudget = in.Foreground
	if secs > 0 {
		r.SpareBudget = max(in.Foreground-reads/secs, in.Foreground/100)
	}
	for _, f := range in.Faults {
		st := r.Recovery[f.Kind]
		need := time.Duration(float64(in.Keys.before(f.Injected, promise.HardLifetime)) / r.SpareBudget * float64(time.Second))
		st.BudgetNeeds = max(st.BudgetNeeds, Duration(need))
		if f.Back.IsZero() || f.Back.Sub(f.Lifted) > need+settleWindow*time.Second {
			st.Slower = true
		}
		r.Recovery[f.Kind] = st
	}
}

// span sums the seconds [from, to).
func (in *sloInput) span(from, to int64) readAgg {
	var g readAgg
	for s := from; s < to; s++ {
		g.add(in.Reads[s])
	}
	return g
}

// back reports whether the system is back over [s, s+settleWindow): the
// watermark fresh at every sample, the hit ratio at its floor, failures at
// their steady rate (at least one failure allowed: at a few hundred reads a
// second a single one is above any rate worth calling a fault).
func (in *sloInput) back(r *SLOReport, s int64) bool {
	from, to := time.Unix(s, 0), time.Unix(s+settleWindow, 0)
	seen := false
	for _, x := range in.Samples {
		if x.At.Before(from) || !x.At.Before(to) {
			continue
		}
		if !x.WMKnown || x.WMAge >= RecoveredAge {
			return false
		}
		seen = true
	}
	if !seen {
		return false
	}
	if !in.settled(r, s) {
		return false
	}
	g := in.span(s, s+settleWindow)
	return float64(g.Reads-g.OK) <= max(1, r.FailCeil*float64(g.Reads))
}

// settled reports whether the hit ratio is at its floor over
// [s, s+settleWindow) and in second s itself (a span whose first second
// is still filling the cache is not settled yet).
func (in *sloInput) settled(r *SLOReport, s int64) bool {
	g, first := in.span(s, s+settleWindow), in.span(s, s+1)
	return g.HitBase > 0 && g.hitRatio() >= r.HitFloor && first.HitBase > 0 && first.hitRatio() >= r.HitFloor
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

// judgeSLO adds the read SLO's judgment to the report: the figures always,
// a KindSLO violation per miss when the run judges it.
func (r *Report) judgeSLO(in sloInput) {
	r.SLO = judgeSLO(in)
	if !in.Judged || len(r.SLO.Misses) == 0 {
		return
	}
	if r.ByKind == nil {
		r.ByKind = map[Kind]int64{}
	}
	n := int64(len(r.SLO.Misses))
	r.ByKind[KindSLO] += n
	r.Violations += n
}

// writeSLOText is the report's read SLO section.
func (s *SLOReport) writeText(b *strings.Builder) {
	if s == nil {
		return
	}
	verdict := "not judged (dense schedule: see --schedule sparse)"
	if s.Judged {
		verdict = "MET"
		if len(s.Misses) > 0 {
			verdict = "MISSED: " + strings.Join(s.Misses, "; ")
		}
	}
	fmt.Fprintf(b, "\nread SLO (p99 <= %s, success >= %s; latency as the harness saw it, request sent to answer read): %s\n",
		s.Target.P99, s.TargetOK, verdict)
	line := func(name string, f WindowFigures) {
		fmt.Fprintf(b, "  %-20s %-8s %9d reads  success %9.4f%%  p50 %-8s p99 %-8s max %-8s hit %.1f%%%s\n", name,
			time.Duration(f.Length), f.Reads, 100*f.Success, time.Duration(f.P50), time.Duration(f.P99), time.Duration(f.Max), 100*f.Hit, apiText(f))
	}
	line("steady state", s.Steady)
	line("warm-up", s.WarmUp)
	fmt.Fprintf(b, "  (settled: hit ratio >= %.1f%% over %d s, steady %.1f%%; back: that, watermark age < %s, failures <= %.3f%%)\n",
		100*s.HitFloor, settleWindow, 100*s.SteadyHit, RecoveredAge, 100*s.FailCeil)
	if len(s.Recovery) == 0 {
		return
	}
	fmt.Fprintf(b, "  fault and recovery by kind (injected -> back; after lift = lifted -> back; budget needs = keys read in the %s before ÷ %.0f reads/s of spare foreground budget)\n",
		promise.HardLifetime, s.SpareBudget)
	kinds := make([]string, 0, len(s.Recovery))
	for k := range s.Recovery {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		st := s.Recovery[k]
		f := st.Figures
		fmt.Fprintf(b, "  %-26s x%-2d window max %-6s mean %-6s after lift max %-6s mean %-6s budget needs %-6s %8d reads success %9.4f%% p99 %-8s hit %.1f%%%s",
			k, st.Count, rnd(st.WindowMax), rnd(st.WindowMean), rnd(st.AfterLiftMax), rnd(st.AfterLiftAvg), rnd(st.BudgetNeeds), f.Reads, 100*f.Success, time.Duration(f.P99), 100*f.Hit, apiText(f))
		if st.Slower {
			b.WriteString(" SLOWER than the budget needs")
		}
		if st.NotRecovered > 0 {
			fmt.Fprintf(b, " not back %d", st.NotRecovered)
		}
		b.WriteString("\n")
	}
}

// apiText is the serve processes' own latency figures, when scraped.
func apiText(f WindowFigures) string {
	if f.APIP99 == 0 {
		return ""
	}
	return fmt.Sprintf("  (API's own count: p99 %s, %.2f%% within target)", time.Duration(f.APIP99).Round(100*time.Microsecond), 100*f.APIWithin)
}

func rnd(d Duration) string { return time.Duration(d).Round(time.Second).String() }
