package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/svgchart"
)

// Unknown is the page's verdict while no check has succeeded (the process
// lacks the connections a check needs, or the check failed).
const Unknown = "UNKNOWN"

// PageConfig configures the status page a process serves at / of its
// metrics address.
type PageConfig struct {
	// Check is the status check run every sample. A config that does not
	// validate (say, a process without a Kafka address) is not an error: the
	// page says what it cannot read and still plots the process's own series.
	Check   Config
	Every   time.Duration // how often to sample (and the page's refresh)
	Window  time.Duration // how much history the plot shows
	Process string        // what this process is, for the title
}

// DefaultPageConfig samples every 5 s and keeps 15 minutes.
func DefaultPageConfig() PageConfig {
	return PageConfig{Check: DefaultConfig(), Every: 5 * time.Second, Window: 15 * time.Minute}
}

// Validate checks the page's own fields, one config.FieldError per field.
func (c PageConfig) Validate() error {
	var p config.Problems
	p.Positive("Every", c.Every)
	if c.Every > 0 && c.Window < c.Every {
		p.Add("Every", "must be at most the plotted window %s (got %s)", c.Window, c.Every)
	}
	// A check without brokers is allowed (see Check), but connection
	// settings given for brokers must be right: a process would otherwise
	// start and its page fail every sample.
	if len(c.Check.Brokers) > 0 {
		p.Nested("Check.Kafka", c.Check.Kafka.Validate())
	}
	return p.Err()
}

// PageDeps are the page's collaborators.
type PageDeps struct {
	Gatherer prometheus.Gatherer // the process's own registry (plotted series)
	Log      *slog.Logger
	// Ready are the process's readiness checks (what its /readyz asks):
	// the page shows the first one failing, with its reason (schema behind
	// the binary, publication or topic missing), so the operator who opens
	// the page sees why the pod takes no traffic.
	Ready []func(context.Context) error
}

// Page samples the pipeline's state into a bounded ring and serves it.
type Page struct {
	cfg    PageConfig
	gather prometheus.Gatherer
	log    *slog.Logger
	ready  []func(context.Context) error

	mu       sync.Mutex
	ring     *ring
	hist     []Histogram // commit->apply snapshots of the last p99Window
	report   *Report
	checkErr error
}

// p99Window is the span the plotted commit->apply p99 covers: one sample
// interval holds too few applies at low rates for a p99 to mean anything.
const p99Window = 30 * time.Second

// NewPage validates cfg. Nothing is read until Run.
func NewPage(cfg PageConfig, deps PageDeps) (*Page, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	n := int(cfg.Window/cfg.Every) + 1
	return &Page{cfg: cfg, gather: deps.Gatherer, log: deps.Log.With("component", "status-page"), ring: newRing(n), ready: deps.Ready}, nil
}

// Run samples until ctx ends.
func (p *Page) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Every)
	defer t.Stop()
	for {
		p.sample(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p *Page) sample(ctx context.Context) {
	var rep *Report
	err := p.cfg.Check.Validate()
	if err == nil {
		var r Report
		if r, err = Check(ctx, p.cfg.Check); err == nil {
			r.Audit = gatherAudit(p.gather)
			rep = &r
		} else if ctx.Err() == nil {
			p.log.Debug("status check failed", "err", err)
		}
	}
	now := time.Now()
	lm := gatherLocal(p.gather, now)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.report, p.checkErr = rep, err
	s := Sample{At: now, WatermarkAgeS: lm.watermarkAge, OldestPendingS: lm.oldestPending, CommitApplyP99S: math.NaN()}
	if rep != nil {
		s.WatermarkAgeS = math.NaN()
		if rep.WatermarkAgeS != nil {
			s.WatermarkAgeS = *rep.WatermarkAgeS
		}
	}
	if len(lm.commitApply.Buckets) > 0 {
		p.hist = append(p.hist, lm.commitApply)
		for len(p.hist) > 2 && now.Sub(p.hist[1].At) >= p99Window {
			p.hist = p.hist[1:]
		}
		if len(p.hist) > 1 {
			s.CommitApplyP99S = Quantile(0.99, p.hist[0], lm.commitApply)
		}
	}
	p.ring.add(s)
}

// Handler serves the page at / and the report at /status.json.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.serveHTML)
	mux.HandleFunc("GET /status.json", p.serveJSON)
	return mux
}

// Samples returns the kept history, oldest first.
func (p *Page) Samples() []Sample {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ring.samples()
}

func (p *Page) current() (*Report, []Sample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.checkErr
	if p.report == nil && err == nil {
		err = errors.New("no sample taken yet")
	}
	return p.report, p.ring.samples(), err
}

// readiness is "ready", or "not ready: " and the first failing check's
// reason ("" when the page was given no checks).
func (p *Page) readiness(ctx context.Context) string {
	if len(p.ready) == 0 {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, f := range p.ready {
		if err := f(ctx); err != nil {
			return "not ready: " + err.Error()
		}
	}
	return "ready"
}

// serveJSON answers what `tidemark status --json` prints, plus this
// process's readiness; 503 with the reason while no check has succeeded.
func (p *Page) serveJSON(w http.ResponseWriter, r *http.Request) {
	rep, _, err := p.current()
	ready := p.readiness(r.Context())
	w.Header().Set("Cache-Control", "no-store")
	if rep == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(map[string]string{"verdict": Unknown, "error": err.Error(), "process_ready": ready})
		return
	}
	w.Header().Set("Content-Type", "application/json")
	cp := *rep
	cp.ProcessReady = ready
	_ = cp.WriteJSON(w)
}

func (p *Page) serveHTML(w http.ResponseWriter, r *http.Request) {
	rep, samples, err := p.current()
	v := pageView{Process: p.cfg.Process, Ready: p.readiness(r.Context()), Refresh: int(math.Ceil(p.cfg.Every.Seconds())), Verdict: Unknown,
		Window: p.cfg.Window.String(), Now: time.Now().UTC().Format(time.RFC3339), Samples: len(samples)}
	if rep != nil {
		v.Verdict, v.Reason, v.Report = rep.Verdict, rep.Reason, rep
		v.WatermarkAge = age(rep.WatermarkAgeS)
		if rep.Slot != nil {
			v.SlotLag = bytes(rep.Slot.LagBytes)
		}
	} else {
		v.Reason = "cannot check freshness: " + err.Error()
	}
	v.Class = strings.ReplaceAll(strings.ToLower(v.Verdict), " ", "-")
	v.Plot = template.HTML(p.plot(samples).String()) // built by svgchart, which escapes every text
	var buf strings.Builder
	if err := pageTmpl.Execute(&buf, v); err != nil {
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, buf.String())
}

// plot draws the kept samples against seconds before now.
func (p *Page) plot(samples []Sample) svgchart.Chart {
	now := time.Now()
	series := []svgchart.Series{
		{Name: "watermark age", Color: "#1f77b4"},
		{Name: "oldest pending event age", Color: "#ff7f0e"},
		{Name: "commit→apply p99 (30s)", Color: "#2ca02c"},
	}
	for _, s := range samples {
		x := -now.Sub(s.At).Seconds()
		series[0].Points = append(series[0].Points, svgchart.Point{X: x, Y: s.WatermarkAgeS})
		series[1].Points = append(series[1].Points, svgchart.Point{X: x, Y: s.OldestPendingS})
		series[2].Points = append(series[2].Points, svgchart.Point{X: x, Y: s.CommitApplyP99S})
	}
	warn, slo := p.cfg.Check.Warn.Seconds(), p.cfg.Check.SLO.Seconds()
	var rules []svgchart.Rule
	if warn > 0 {
		rules = append(rules, svgchart.Rule{Y: warn, Label: fmt.Sprintf("warn %gs", warn), Color: "#b58900"})
	}
	if slo > 0 {
		rules = append(rules, svgchart.Rule{Y: slo, Label: fmt.Sprintf("SLO %gs", slo), Color: "#dc322f"})
	}
	// The X axis spans the history kept so far (at least a minute), up to
	// the window: a young process's few samples are not a sliver at the edge.
	span := time.Minute
	if len(samples) > 0 {
		span = max(span, now.Sub(samples[0].At).Round(time.Second))
	}
	span = min(span, p.cfg.Window)
	return svgchart.Chart{
		Title: fmt.Sprintf("Freshness, last %s (keeps %s)", span, p.cfg.Window), XLabel: "time", YLabel: "seconds",
		Width: 760, Height: 300, Series: series, Rules: rules,
		XMin: -span.Seconds(), XMax: 0,
		XTick: func(x float64) string {
			if x > -1 {
				return "now"
			}
			return "-" + (time.Duration(-x) * time.Second).Round(time.Second).String()
		},
	}
}

type pageView struct {
	Process      string
	Ready        string // this process's readiness ("" unknown)
	Refresh      int
	Verdict      string
	Class        string
	Reason       string
	Now          string
	Window       string
	Samples      int
	WatermarkAge string
	SlotLag      string
	Report       *Report
	Plot         template.HTML
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{"age": age}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>tidemark {{.Verdict}}</title>
<style>
body{font-family:sans-serif;margin:1.5em;color:#222;max-width:60em}
h1{font-size:1.3em;margin:0 0 .5em}
.verdict{display:inline-block;padding:.3em .8em;border-radius:.3em;font-weight:bold;font-size:1.4em;color:#fff}
.ok{background:#2e7d32}.at-risk{background:#ef8f00}.breached{background:#c62828}.unknown{background:#757575}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .8em;text-align:right;border-bottom:1px solid #ddd}
th{background:#f4f4f4}.stalled{color:#c62828}.ok-text{color:#2e7d32}.k{text-align:left;color:#555;white-space:nowrap}#summary td:nth-child(2){text-align:left}small{color:#777}
</style></head><body>
<h1>tidemark status{{if .Process}} <small>({{.Process}})</small>{{end}}</h1>
{{with .Ready}}<p id="process-ready" class="{{if eq . "ready"}}ok-text{{else}}stalled{{end}}">{{if $.Process}}this {{$.Process}} process: {{end}}{{.}}</p>{{end}}
<p><span id="verdict" class="verdict {{.Class}}">{{.Verdict}}</span> <span id="reason">{{.Reason}}</span></p>
<div id="plot">{{.Plot}}</div>
<p><small>{{.Samples}} samples kept (last {{.Window}}); refreshed every {{.Refresh}}s; page rendered {{.Now}}. The same report as JSON: <a href="status.json">status.json</a>; metrics: <a href="metrics">/metrics</a>.</small></p>
{{with .Report}}
<table id="summary">
<tr><td class="k">watermark age</td><td>{{$.WatermarkAge}}</td><td class="k"><small>bound on the age of the oldest pending event; warn {{.WarnSeconds}}s, SLO {{.SLOSeconds}}s</small></td></tr>
<tr><td class="k">reset_at</td><td>{{if .ResetAt}}{{.ResetAt.Format "2006-01-02T15:04:05Z07:00"}}{{else}}none{{end}}</td><td></td></tr>
{{with .Warm}}<tr><td class="k">warm-up</td><td id="warm">{{.Line}}</td><td></td></tr>{{end}}
{{with .Audit}}<tr><td class="k">audit</td><td id="audit">{{.}}</td><td></td></tr>{{end}}
{{if gt (len .Namespaces) 1}}{{range .Namespaces}}<tr><td class="k">namespace</td><td class="namespace">{{.}}</td><td></td></tr>{{end}}{{end}}
{{range .Rollout}}<tr><td class="k">rollout</td><td class="rollout">{{.}}</td><td></td></tr>{{end}}
<tr><td class="k">consumer lag</td><td>{{.TotalLag}} records</td><td></td></tr>
<tr><td class="k">DLQ depth</td><td id="dlq">{{.DLQDepth}} records</td><td></td></tr>
{{with .EvictionPolicy}}<tr><td class="k">maxmemory-policy</td><td id="maxmemory">{{range $addr, $pol := .}}{{$addr}} {{$pol}}<br>{{end}}</td><td></td></tr>{{end}}
<tr><td class="k">replication slot</td><td id="slot">{{with .Slot}}{{.Name}}: {{if not .Exists}}missing{{else}}{{if .Active}}active{{else}}inactive{{end}}, lag {{$.SlotLag}}, wal_status {{.WALStatus}}{{end}}{{else}}not checked (no Postgres address){{end}}</td><td></td></tr>
{{with .SourceReaders}}<tr><td class="k">source readers</td><td id="source-readers">{{.}}</td><td></td></tr>{{end}}
</table>
<table id="partitions">
<tr><th>partition</th><th>end offset</th><th>last applied</th><th>lag</th><th>watermark age</th><th class="k">state</th></tr>
{{range .Partitions}}<tr><td>{{.Partition}}</td><td>{{.EndOffset}}</td><td>{{if ge .Committed 0}}{{.Committed}}{{else}}-{{end}}</td><td>{{.Lag}}</td><td>{{age .WatermarkAgeS}}</td><td class="k">{{with .Stalled}}<b class="stalled">STALLED</b> since {{.Since.UTC.Format "15:04:05"}} on {{.Op}}: {{.Error}}{{else}}moving{{end}}</td></tr>
{{end}}</table>
{{end}}
</body></html>
`))
