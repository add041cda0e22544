package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Report is the outcome of a run. The run passes only with zero violations.
type Report struct {
	Seed        int64    `json:"seed"`
	Duration    Duration `json:"duration"`
	Cluster     bool     `json:"redis_cluster"`
	Kafka       string   `json:"kafka"`
	RateUpdates float64  `json:"rate_updates_asked"`
	RateReads   float64  `json:"rate_reads_asked"`
	Bound       Duration `json:"bound"`

	Commits       int64            `json:"commits"`         // committed source transactions during the run
	Events        int64            `json:"events"`          // committed row versions (each one a change event)
	RolledBack    int64            `json:"rolled_back"`     // SQL transactions the writers rolled back
	Patches       int64            `json:"api_patches"`     // successful API PATCHes
	Creates       int64            `json:"api_creates"`     // items created through the API
	UpdatesPerSec float64          `json:"updates_per_s"`   // achieved
	AnswersPerSec float64          `json:"answers_per_s"`   // achieved
	WriteErrors   int64            `json:"write_errors"`    // writes that failed (faults)
	Answers       int64            `json:"answers"`         // every read, including 503s and failed connections
	Checked       int64            `json:"answers_checked"` // answers judged (200, 404, 412, other 4xx/5xx but 503)
	ByStatus      map[string]int64 `json:"answers_by_status"`

	Violations      int64          `json:"violations"`
	ByKind          map[Kind]int64 `json:"violations_by_kind"`
	FirstViolations []Violation    `json:"first_violations"`

	WorstAge       Duration `json:"worst_observation_age"`
	WorstAgeAnswer *Answer  `json:"worst_observation_age_answer,omitempty"`

	Availability              float64 `json:"availability"` // share of answers that were not 503 / no answer
	AvailabilityOutsideFaults float64 `json:"availability_outside_faults"`

	// The source budget, judged from the source's own count (pg_stat_statements).
	SourceReadsPeak        float64            `json:"source_reads_per_s_peak"`
	SourceReadsPeakAt      Duration           `json:"source_reads_peak_at"`       // since the run started
	SourceReadsPeakByClass map[string]float64 `json:"source_reads_peak_by_class"` // reads in the peak sample
	SourceClassPeaks       map[string]float64 `json:"source_reads_per_s_peak_of_class"`
	SourceBudget           float64            `json:"source_budget_per_s"` // every class together, shared by the serve processes
	Budget                 BudgetLimits       `json:"source_budget"`
	BudgetTolerance        string             `json:"source_budget_tolerance"`
	SourceSamples          int                `json:"source_samples"`
	BudgetViolations       []BudgetViolation  `json:"budget_violations"`
	// APISourceReadsPeak is the serve processes' own count, for comparison.
	APISourceReadsPeak float64 `json:"api_source_reads_per_s_peak"`

	CommitToApplyP50 Duration `json:"commit_to_apply_p50_outside_faults"`
	CommitToApplyP99 Duration `json:"commit_to_apply_p99_outside_faults"`

	// SLO is the read SLO over warm-up, fault and recovery, and steady
	// state (slo.go).
	SLO *SLOReport `json:"read_slo,omitempty"`

	Faults   []FaultRecord           `json:"faults"`
	Recovery map[string]RecoveryStat `json:"recovery_by_kind"`
	Restarts map[string]int          `json:"unplanned_restarts,omitempty"` // stages that exited by themselves
	Upgrade  *UpgradeReport          `json:"upgrade,omitempty"`            // a rolling or namespace upgrade (upgrade.go)
	Logs     string                  `json:"logs,omitempty"`
}

// RecoveryStat summarises one fault kind: how often it ran and how long,
// after it was lifted, the watermark age took to be back under RecoveredAge.
type RecoveryStat struct {
	Count        int      `json:"count"`
	NotRecovered int      `json:"not_recovered"`
	Max          Duration `json:"max"`
	Mean         Duration `json:"mean"`
}

// Duration marshals as a Go duration string.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d Duration) String() string { return time.Duration(d).String() }

// Pass is the verdict: no answer broke the promise (and an upgrade the run
// was asked for was carried out).
func (r *Report) Pass() bool { return r.Violations == 0 && (r.Upgrade == nil || r.Upgrade.Done()) }

// FreshnessViolations is the answers that broke the freshness promise (the
// violations that are not the budget's or the read SLO's).
func (r *Report) FreshnessViolations() int64 {
	return r.Violations - r.ByKind[KindBudget] - r.ByKind[KindSLO]
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report for a person.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	verdict := "PASS"
	if !r.Pass() {
		verdict = "FAIL"
	}
	redisKind := "redis-server"
	if r.Cluster {
		redisKind = "Redis Cluster (3 masters)"
	}
	fmt.Fprintf(&b, "tidemark-lab chaos: %s — %d violations of the %s freshness promise, %d of the source budget, %d of the read SLO\n\n", verdict,
		r.FreshnessViolations(), r.Bound, r.ByKind[KindBudget], r.ByKind[KindSLO])
	fmt.Fprintf(&b, "run          seed %d, %s, %s, kafka %s\n", r.Seed, r.Duration, redisKind, r.Kafka)
	fmt.Fprintf(&b, "load         asked %g updates/s, %g reads/s; achieved %.0f updates/s, %.0f answers/s\n", r.RateUpdates, r.RateReads, r.UpdatesPerSec, r.AnswersPerSec)
	fmt.Fprintf(&b, "source       %d commits, %d events (row versions), %d rolled back, %d API PATCHes, %d API creates, %d failed writes\n", r.Commits, r.Events, r.RolledBack, r.Patches, r.Creates, r.WriteErrors)
	fmt.Fprintf(&b, "answers      %d, checked %d; by status %s\n", r.Answers, r.Checked, statusLine(r.ByStatus))
	fmt.Fprintf(&b, "violations   %d", r.Violations)
	for _, k := range append(slices.Clone(Kinds), KindBudget, KindSLO) {
		if n := r.ByKind[k]; n > 0 {
			fmt.Fprintf(&b, "  %s %d", k, n)
		}
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "worst age    %s (least observation age of any served value)", time.Duration(r.WorstAge).Round(time.Millisecond))
	if a := r.WorstAgeAnswer; a != nil {
		fmt.Fprintf(&b, ": %s/%s v%d via serve%d at %s, Cache-Status %q", a.Tenant, a.Item, a.Version, a.Serve, ts(a.Sent), a.CacheStatus)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "available    %.3f%% overall, %.3f%% outside fault windows (non-503 answers)\n", 100*r.Availability, 100*r.AvailabilityOutsideFaults)
	fmt.Fprintf(&b, "budget       %d violations of the source budget (%.0f reads/s in total; %s), %d samples counted at the source\n",
		r.ByKind[KindBudget], r.SourceBudget, classLimitsText(r.Budget.Classes), r.SourceSamples)
	fmt.Fprintf(&b, "source reads peak %.0f/s against a budget of %.0f/s", r.SourceReadsPeak, r.SourceBudget)
	if r.SourceReadsPeak > 0 {
		fmt.Fprintf(&b, " at +%s (%s)", time.Duration(r.SourceReadsPeakAt).Round(time.Second), sharesText(r.SourceReadsPeakByClass))
	}
	fmt.Fprintf(&b, "; per class peaks/s: %s; the serve processes counted a peak of %.0f/s\n", sharesText(r.SourceClassPeaks), r.APISourceReadsPeak)
	fmt.Fprintf(&b, "commit->apply outside faults: p50 %s, p99 %s\n", time.Duration(r.CommitToApplyP50).Round(time.Millisecond), time.Duration(r.CommitToApplyP99).Round(time.Millisecond))
	r.Upgrade.writeText(&b)
	if len(r.Restarts) > 0 {
		fmt.Fprintf(&b, "unplanned restarts (stage exited by itself): %v\n", r.Restarts)
	}
	r.SLO.writeText(&b)
	b.WriteString("\nrecovery by fault kind (lifted -> watermark age < 5s)\n")
	kinds := make([]string, 0, len(r.Recovery))
	for k := range r.Recovery {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		s := r.Recovery[k]
		fmt.Fprintf(&b, "  %-20s x%-3d max %-8s mean %-8s", k, s.Count, time.Duration(s.Max).Round(100*time.Millisecond), time.Duration(s.Mean).Round(100*time.Millisecond))
		if s.NotRecovered > 0 {
			fmt.Fprintf(&b, " not recovered %d", s.NotRecovered)
		}
		b.WriteString("\n")
	}
	b.WriteString("\nfaults\n")
	var start time.Time
	if len(r.Faults) > 0 {
		start = r.Faults[0].Injected.Add(-time.Duration(r.Faults[0].Planned))
	}
	for _, f := range r.Faults {
		rec := "not recovered"
		if !f.Recovered.IsZero() {
			rec = "recovered +" + f.Recovered.Sub(f.Lifted).Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(&b, "  %7s  %-20s %-40s held %-7s %s", "+"+f.Injected.Sub(start).Round(time.Second).String(), f.Kind, f.Target,
			f.Lifted.Sub(f.Injected).Round(100*time.Millisecond), rec)
		if !f.Back.IsZero() {
			fmt.Fprintf(&b, ", back +%s", f.Back.Sub(f.Lifted).Round(time.Second))
		}
		if f.Error != "" {
			fmt.Fprintf(&b, "  error: %s", f.Error)
		}
		b.WriteString("\n")
	}
	if len(r.FirstViolations) > 0 {
		fmt.Fprintf(&b, "\nfirst %d violations in full\n", len(r.FirstViolations))
		for i, v := range r.FirstViolations {
			a := v.Answer
			fmt.Fprintf(&b, "\n%d. %s: %s\n", i+1, v.Kind, v.Detail)
			if a.Sent.IsZero() {
				continue // judged by a fault, not from an answer
			}
			q := ""
			if a.MinVersion > 0 {
				q = fmt.Sprintf("?min_version=%d", a.MinVersion)
			}
			fmt.Fprintf(&b, "   request  GET /v1/catalog/items/%s%s as %s via serve%d, sent %s, answer arrived %s\n", a.Item, q, a.Tenant, a.Serve, ts(a.Sent), ts(a.Received))
			fmt.Fprintf(&b, "   answer   %d version %d payload %s/%s v%d Cache-Status %q\n", a.Status, a.Version, a.PayloadTenant, a.PayloadItem, a.PayloadVersion, a.CacheStatus)
			b.WriteString("   source   ")
			for j, c := range v.History {
				if j > 0 {
					b.WriteString(", ")
				}
				d := ""
				if c.Deleted {
					d = " (deleted)"
				}
				if !c.VisibleBy.IsZero() {
					d += " (visible by " + ts(c.VisibleBy) + ")"
				}
				fmt.Fprintf(&b, "v%d@%s%s", c.Version, ts(c.At), d)
			}
			b.WriteString("\n")
		}
	}
	if len(r.BudgetViolations) > 0 {
		fmt.Fprintf(&b, "\nfirst %d budget violations (of %d) in full\n", min(len(r.BudgetViolations), firstViolations), r.ByKind[KindBudget])
		for i, v := range r.BudgetViolations[:min(len(r.BudgetViolations), firstViolations)] {
			fmt.Fprintf(&b, "\n%d. budget: %s %.0f reads in %s (%.0f/s) at +%s (%s), limit %.0f/s: at most %.0f allowed\n", i+1, v.Class, v.Reads,
				time.Duration(v.Interval).Round(time.Millisecond), v.PerSecond, time.Duration(v.Offset).Round(time.Second), ts(v.At), v.Limit, v.Allowed)
			fmt.Fprintf(&b, "   classes  %s\n", sharesText(v.Shares))
			if len(v.Faults) == 0 {
				b.WriteString("   faults   none within 10 s\n")
			}
			for _, f := range v.Faults {
				fmt.Fprintf(&b, "   fault    %s\n", f)
			}
		}
	}
	if r.Logs != "" {
		fmt.Fprintf(&b, "\nlogs and histories: %s\n", r.Logs)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func statusLine(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// recoveries fills each fault's Recovered from the samples and returns the
// fault windows (injected until recovered, or until the end of the run).
func recoveries(faults []FaultRecord, samples []sample, end time.Time) []window {
	var ws []window
	for i := range faults {
		f := &faults[i]
		for _, s := range samples {
			if s.At.After(f.Lifted) && s.WMKnown && s.WMAge < RecoveredAge {
				f.Recovered = s.At
				break
			}
		}
		to := f.Recovered
		if to.IsZero() {
			to = end
		}
		ws = append(ws, window{f.Injected, to.Add(time.Second)})
	}
	return ws
}

func recoveryStats(faults []FaultRecord) map[string]RecoveryStat {
	out := map[string]RecoveryStat{}
	sums := map[string]time.Duration{}
	for _, f := range faults {
		s := out[f.Kind]
		s.Count++
		if f.Recovered.IsZero() {
			s.NotRecovered++
		} else {
			d := f.Recovered.Sub(f.Lifted)
			sums[f.Kind] += d
			if Duration(d) > s.Max {
				s.Max = Duration(d)
			}
		}
		out[f.Kind] = s
	}
	for k, s := range out {
		if n := s.Count - s.NotRecovered; n > 0 {
			s.Mean = Duration(sums[k] / time.Duration(n))
		}
		out[k] = s
	}
	return out
}

// summarise fills the report's figures from the recorder's statistics and
// the observer's samples.
func (r *Report) summarise(st *answerStats, samples []sample, bounds []float64, ws []window, start, end time.Time) {
	r.Answers, r.Checked, r.Violations = st.Answers, st.Checked, st.Violations
	r.ByStatus = map[string]int64{}
	for code, n := range st.ByStatus {
		name := fmt.Sprint(code)
		if code == 0 {
			name = "no-answer"
		}
		r.ByStatus[name] = n
	}
	r.ByKind, r.FirstViolations = st.ByKind, st.First
	r.WorstAge, r.WorstAgeAnswer = Duration(st.WorstAge), st.WorstAgeOf
	var all, ok, allOut, okOut int64
	for sec, c := range st.perSecond {
		all += c[0]
		ok += c[1]
		if !inAny(ws, time.Unix(sec, 0)) && !inAny(ws, time.Unix(sec+1, 0)) {
			allOut += c[0]
			okOut += c[1]
		}
	}
	r.Availability, r.AvailabilityOutsideFaults = ratio(ok, all), ratio(okOut, allOut)
	var c2a []float64
	for _, s := range samples {
		r.APISourceReadsPeak = max(r.APISourceReadsPeak, s.APISourceReads)
		if s.C2A != nil && !inAny(ws, s.At) && !inAny(ws, s.At.Add(-s.Interval)) {
			if c2a == nil {
				c2a = make([]float64, len(s.C2A))
			}
			for i, v := range s.C2A {
				c2a[i] += v
			}
		}
	}
	if q, ok := quantile(bounds, c2a, 0.5); ok {
		r.CommitToApplyP50 = secs(q)
	}
	if q, ok := quantile(bounds, c2a, 0.99); ok {
		r.CommitToApplyP99 = secs(q)
	}
	if d := end.Sub(start).Seconds(); d > 0 {
		r.AnswersPerSec = float64(st.Answers) / d
		r.UpdatesPerSec = float64(r.Events) / d
	}
}

func secs(q float64) Duration {
	if math.IsInf(q, 1) {
		return Duration(math.MaxInt64)
	}
	return Duration(q * float64(time.Second))
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// judgeBudget judges the source's per-second reads against the budget and
// adds the violations to the verdict.
func (r *Report) judgeBudget(l BudgetLimits, secs []SourceSecond, faults []FaultRecord, start, end time.Time) {
	r.Budget, r.SourceBudget, r.BudgetTolerance, r.SourceSamples = l, l.Total, l.ToleranceText(), len(secs)
	r.SourceClassPeaks = map[string]float64{}
	for _, s := range secs {
		iv := time.Duration(s.Interval).Seconds()
		if iv <= 0 {
			continue
		}
		if t := s.total() / iv; t > r.SourceReadsPeak {
			r.SourceReadsPeak, r.SourceReadsPeakAt, r.SourceReadsPeakByClass = t, Duration(s.At.Sub(start)), s.Reads
		}
		for c, n := range s.Reads {
			r.SourceClassPeaks[c] = max(r.SourceClassPeaks[c], n/iv)
		}
	}
	r.BudgetViolations = JudgeBudget(l, secs, faults, start, end)
	if n := int64(len(r.BudgetViolations)); n > 0 {
		if r.ByKind == nil {
			r.ByKind = map[Kind]int64{}
		}
		r.ByKind[KindBudget] += n
		r.Violations += n
	}
}

func classLimitsText(m map[string]float64) string {
	var parts []string
	for _, c := range []string{ClassForeground, ClassBackground, ClassReadYourWrites} {
		if n, ok := m[c]; ok {
			parts = append(parts, fmt.Sprintf("%s %.0f", c, n))
		}
	}
	return strings.Join(parts, ", ")
}
