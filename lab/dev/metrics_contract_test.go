package dev

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tidemark/tidemark/lab/testenv"
)

// inProcess is a pipeline started in this process on test servers.
type inProcess struct {
	p       *pipeline
	ep      Endpoints
	cfg     PipelineConfig
	keys    []apiKey
	apiBase string
}

func startInProcess(t *testing.T) *inProcess {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	r := testenv.StartRedis(t)
	k := testenv.StartKafka(t)
	ep := Endpoints{PG: pg.MigratedDatabase(t), Redis: r.URL(), Brokers: k.Brokers}
	ctx := testenv.Context(t, 2*time.Minute)
	keys, _, err := seedDemo(ctx, ep.PG, filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultPipelineConfig()
	cfg.Topic, cfg.Slot, cfg.Group = testenv.Unique(t, "topic"), testenv.Unique(t, "slot"), testenv.Unique(t, "group")
	cfg.Partitions = 3
	cfg.APIAddr = freeAddr(t)
	p, err := startPipeline(ctx, NewStages(cfg, ep, testenv.Logger(t)), freeAddr(t), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("pipeline stop: %v", err)
		}
	})
	return &inProcess{p: p, ep: ep, cfg: cfg, keys: keys, apiBase: "http://" + cfg.APIAddr}
}

// metricRef matches a tidemark metric name in a PromQL expression.
var metricRef = regexp.MustCompile(`\btidemark_[a-z0-9_]+`)

// yamlKey matches a line that starts a YAML key (ending an expr block).
var yamlKey = regexp.MustCompile(`^(- )?[a-z_]+:`)

// referencedMetrics lists the tidemark metrics the alert rules and the
// Grafana dashboard query, with where each is used.
func referencedMetrics(t *testing.T) map[string]string {
	t.Helper()
	refs := map[string]string{}
	rules, err := os.ReadFile("../../compose/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	// Only the expressions: annotations may mention names in prose.
	inExpr := false
	for _, line := range strings.Split(string(rules), "\n") {
		trimmed := strings.TrimSpace(line)
		if yamlKey.MatchString(trimmed) {
			inExpr = strings.HasPrefix(trimmed, "expr:")
		}
		if inExpr && !strings.HasPrefix(trimmed, "#") {
			for _, m := range metricRef.FindAllString(line, -1) {
				refs[m] = "alerts.yml"
			}
		}
	}
	dash, err := os.ReadFile("../../compose/grafana/dashboards/tidemark.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range metricRef.FindAllString(tg.Expr, -1) {
				refs[m] = fmt.Sprintf("dashboard panel %q", p.Title)
			}
		}
	}
	if len(refs) < 20 {
		t.Fatalf("found only %d metric references in the rules and dashboard: the parsing is broken: %v", len(refs), refs)
	}
	return refs
}

// scrape reads /metrics over HTTP, as Prometheus does.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// exported reports whether name is a series of fams (histogram series by
// their _bucket/_sum/_count names).
func exported(fams map[string]*dto.MetricFamily, name string) bool {
	if f, ok := fams[name]; ok && len(f.GetMetric()) > 0 {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if f, ok := fams[base]; ok && len(f.GetMetric()) > 0 &&
				(f.GetType() == dto.MetricType_HISTOGRAM || suf != "_bucket" && f.GetType() == dto.MetricType_SUMMARY) {
				return true
			}
		}
	}
	return false
}

// TestAlertAndDashboardMetricsExported: every metric an alert rule or a
// dashboard panel queries is exported by a running pipeline, so a renamed
// metric breaks this test instead of silently emptying a panel or an alert.
func TestAlertAndDashboardMetricsExported(t *testing.T) {
	t.Parallel()
	refs := referencedMetrics(t)
	ip := startInProcess(t)
	// One API request, so the per-route series exist.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, ip.apiBase+"/v1/catalog/items/item-00001", nil)
	req.Header.Set("Authorization", "Bearer "+ip.keys[0].key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	usedBy := map[string]string{}
	for name, where := range refs {
		usedBy[name] = "used by " + where
	}
	waitExported(t, ip.p.metricsAddr, "every referenced metric exported", usedBy)
}

// waitExported waits until the metrics endpoint at addr exports every
// metric of want (its name: what needs it), and fails naming those it does
// not.
func waitExported(t *testing.T, addr, what string, want map[string]string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, func() error {
		fams := scrape(t, addr)
		var missing []string
		for name, who := range want {
			if !exported(fams, name) {
				missing = append(missing, name+" ("+who+")")
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			return fmt.Errorf("not exported by the running pipeline:\n  %s", strings.Join(missing, "\n  "))
		}
		return nil
	})
}

// TestDevRunsWhatServeRuns: dev builds its roles through internal/wiring as
// the stand-alone commands do, so the parts serve and apply run beside the
// API and the applier (clock guard, hot-set tracker, warmer, replica
// builder, auditor) run in dev too, each seen by a metric of its own.
func TestDevRunsWhatServeRuns(t *testing.T) {
	t.Parallel()
	ip := startInProcess(t)
	waitExported(t, ip.p.metricsAddr, "every part of serve runs in dev", map[string]string{
		"tidemark_clock_offset_seconds": "clock guard",
		"tidemark_hotset_tracked_keys":  "hot-set tracker",
		"tidemark_warm_remaining_keys":  "warmer",
		"tidemark_replica_hot_keys":     "replica builder",
		"tidemark_audit_checked_total":  "auditor",
	})
}
