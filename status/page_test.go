package status

import (
	"context"
	"io"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The ring keeps the newest samples only: the page's memory is bounded.
func TestRingKeepsNewest(t *testing.T) {
	r := newRing(3)
	for i := 0; i < 7; i++ {
		r.add(Sample{WatermarkAgeS: float64(i)})
	}
	got := r.samples()
	if len(got) != 3 || got[0].WatermarkAgeS != 4 || got[2].WatermarkAgeS != 6 {
		t.Fatalf("samples %+v, want ages 4,5,6", got)
	}
}

// The plotted p99 is interpolated within its bucket, from the observations
// between two snapshots only.
func TestQuantileBetweenSnapshots(t *testing.T) {
	prev := Histogram{Count: 100, Buckets: map[float64]float64{0.1: 100, 1: 100, math.Inf(1): 100}}
	cur := Histogram{Count: 200, Buckets: map[float64]float64{0.1: 100, 1: 200, math.Inf(1): 200}}
	if q := Quantile(0.99, prev, cur); math.Abs(q-0.991) > 1e-9 {
		t.Fatalf("p99 = %v, want 0.991 (99%% of the way through the 0.1-1 bucket)", q)
	}
	if q := Quantile(0.99, cur, cur); !math.IsNaN(q) {
		t.Fatalf("p99 without observations = %v, want NaN", q)
	}
}

// A process that cannot run the status check (no Kafka address) still
// serves the page: verdict UNKNOWN with the reason, and the plot of its own
// series; /status.json answers 503.
func TestPageWithoutCheckPlotsLocalSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	wm := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_watermark_age_seconds"})
	oldest := prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_oldest_pending_event_age_seconds"})
	reg.MustRegister(wm, oldest)
	cfg := DefaultPageConfig()
	cfg.Check = Config{} // nothing to check against
	cfg.Every, cfg.Window = 10*time.Millisecond, time.Second
	p, err := NewPage(cfg, PageDeps{Gatherer: reg})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		wm.Set(float64(i))
		oldest.Set(float64(i) / 2)
		p.sample(context.Background())
	}
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()

	resp, err := srv.Client().Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	html := string(b)
	for _, want := range []string{`id="verdict" class="verdict unknown">UNKNOWN<`, "Brokers: is required", `http-equiv="refresh"`,
		`data-series="watermark age"`, `data-series="oldest pending event age"`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q:\n%s", want, html)
		}
	}
	if strings.Contains(html, "<script") || strings.Contains(html, "src=") || strings.Contains(html, "@import") {
		t.Errorf("page loads something: it must be self-contained")
	}
	line := html[strings.Index(html, `data-series="watermark age"`):]
	line = line[strings.Index(line, `points="`)+8:]
	if n := len(strings.Fields(line[:strings.Index(line, `"`)])); n != 4 {
		t.Errorf("watermark age line has %d points, want 4", n)
	}

	resp, err = srv.Client().Get(srv.URL + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Errorf("/status.json without a check: %d, want 503", resp.StatusCode)
	}
}
