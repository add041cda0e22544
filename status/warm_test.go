package status

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/warm"
)

// The warmer's progress, as it publishes it in the cache tier, is a line of
// `tidemark status`, a field of /status.json and a row of the page; the
// auditor's figures of the serving process are on the page too.
func TestWarmAndAuditShown(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := testenv.Context(t, 20*time.Second)
	cfg := DefaultConfig()
	cfg.Redis = "redis://" + r.Addr + "/0"
	if w, err := readWarm(ctx, cfg); err != nil || w != nil {
		t.Fatalf("no run published: readWarm = %+v, %v; want nil", w, err)
	}
	now := time.Now()
	if err := r.Client(t).HSet(ctx, warm.ProgressKey(cfg.Namespace), "state", warm.StateRunning, "reason", warm.ReasonIdentity,
		"tenant", "", "total", 2000, "done", 800, "filled", 790, "rate", "500", "started", now.Add(-3*time.Second).UnixMilli(),
		"updated", now.UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	w, err := readWarm(ctx, cfg)
	if err != nil || w == nil {
		t.Fatalf("readWarm = %+v, %v", w, err)
	}
	want := "warm: running (cache tier identity changed): 800/2000 keys, 790 filled, 500 keys/s"
	if w.Line != want || w.Done != 800 || w.Total != 2000 {
		t.Errorf("warm = %+v, want line %q", w, want)
	}

	reg := prometheus.NewRegistry()
	for name, v := range map[string]float64{"tidemark_audit_checked_total": 14856, "tidemark_audit_consistency_nines": 4.17, "tidemark_audit_leader": 1} {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "test"})
		g.Set(v)
		reg.MustRegister(g)
	}
	viol := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidemark_audit_violations_total", Help: "test"}, []string{"kind"})
	viol.WithLabelValues("behind_servable").Add(2)
	reg.MustRegister(viol)
	a := gatherAudit(reg)
	if a == nil || a.Checked != 14856 || a.Violations != 2 || !a.Leader {
		t.Fatalf("gatherAudit = %+v", a)
	}
	if gatherAudit(prometheus.NewRegistry()) != nil {
		t.Error("a process without an auditor shows audit figures")
	}

	rep := Report{Verdict: OK, Warm: w, Audit: a}
	var text, js strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var page strings.Builder
	if err := pageTmpl.Execute(&page, pageView{Report: &rep}); err != nil {
		t.Fatal(err)
	}
	for where, got := range map[string]string{"status text": text.String(), "page": page.String()} {
		for _, s := range []string{want, "14856 entries checked here, 2 violations, 4.17 nines"} {
			if !strings.Contains(got, s) {
				t.Errorf("%s lacks %q:\n%s", where, s, got)
			}
		}
	}
	for _, s := range []string{`"done_keys": 800`, `"consistency_nines": 4.17`} {
		if !strings.Contains(js.String(), s) {
			t.Errorf("status.json lacks %s:\n%s", s, js.String())
		}
	}
}
