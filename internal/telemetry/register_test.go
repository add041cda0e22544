package telemetry_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/tidemark/tidemark/internal/telemetry"
)

// Two packages in one process registering the same series share it.
func TestInstrumentsShareOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := telemetry.NewInstruments(reg)
	b := telemetry.NewInstruments(reg)
	ca := a.CounterVec("tidemark_test_things_total", "Things.", "kind")
	cb := b.CounterVec("tidemark_test_things_total", "Things.", "kind")
	if err := errors.Join(a.Err(), b.Err()); err != nil {
		t.Fatalf("second registration of the same series: %v", err)
	}
	if ca != cb {
		t.Fatal("the second registration got a new collector, not the registered one")
	}
	cb.WithLabelValues("x").Add(2)
	if got := counterValue(t, ca.WithLabelValues("x")); got != 2 {
		t.Fatalf("shared counter: got %v, want 2", got)
	}
	// A different series under the same name is still an error.
	b.Gauge("tidemark_test_things_total", "Other help.")
	if b.Err() == nil {
		t.Fatal("a conflicting series under a registered name was accepted")
	}
}

// A stage a process runs once refuses a second registration, stops at the
// first error, and registers nothing after it.
func TestExclusiveInstrumentsRefuseASecondRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := telemetry.NewExclusiveInstruments(reg)
	first.Counter("tidemark_test_a_total", "A.")
	if err := first.Err(); err != nil {
		t.Fatal(err)
	}
	second := telemetry.NewExclusiveInstruments(reg)
	second.Counter("tidemark_test_a_total", "A.")
	second.Gauge("tidemark_test_b", "B.")
	var are prometheus.AlreadyRegisteredError
	if err := second.Err(); !errors.As(err, &are) || strings.Count(err.Error(), "\n") != 0 {
		t.Fatalf("second registration: got %v, want exactly one AlreadyRegisteredError", err)
	}
	if got := exposition(t, reg); strings.Contains(got, "tidemark_test_b") {
		t.Fatalf("registered after the first error:\n%s", got)
	}
}

// Each maker registers what it makes, with the name, help, labels and
// buckets it was given.
func TestInstrumentsMakeWhatTheyAreAskedFor(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := telemetry.NewInstruments(reg)
	in.Counter("tidemark_test_c_total", "C.").Inc()
	in.CounterVec("tidemark_test_cv_total", "CV.", "a", "b").WithLabelValues("1", "2").Inc()
	in.Gauge("tidemark_test_g", "G.").Set(3)
	in.GaugeVec("tidemark_test_gv", "GV.", "a").WithLabelValues("1").Set(4)
	in.GaugeFunc("tidemark_test_gf", "GF.", func() float64 { return 5 })
	in.Histogram("tidemark_test_h_seconds", "H.", []float64{1, 2}).Observe(1.5)
	in.HistogramVec("tidemark_test_hv_seconds", "HV.", []float64{1}, "a").WithLabelValues("1").Observe(0.5)
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
	want := `# HELP tidemark_test_c_total C.
# TYPE tidemark_test_c_total counter
tidemark_test_c_total 1
# HELP tidemark_test_cv_total CV.
# TYPE tidemark_test_cv_total counter
tidemark_test_cv_total{a="1",b="2"} 1
# HELP tidemark_test_g G.
# TYPE tidemark_test_g gauge
tidemark_test_g 3
# HELP tidemark_test_gf GF.
# TYPE tidemark_test_gf gauge
tidemark_test_gf 5
# HELP tidemark_test_gv GV.
# TYPE tidemark_test_gv gauge
tidemark_test_gv{a="1"} 4
# HELP tidemark_test_h_seconds H.
# TYPE tidemark_test_h_seconds histogram
tidemark_test_h_seconds_bucket{le="1"} 0
tidemark_test_h_seconds_bucket{le="2"} 1
tidemark_test_h_seconds_bucket{le="+Inf"} 1
tidemark_test_h_seconds_sum 1.5
tidemark_test_h_seconds_count 1
# HELP tidemark_test_hv_seconds HV.
# TYPE tidemark_test_hv_seconds histogram
tidemark_test_hv_seconds_bucket{a="1",le="1"} 1
tidemark_test_hv_seconds_bucket{a="1",le="+Inf"} 1
tidemark_test_hv_seconds_sum{a="1"} 0.5
tidemark_test_hv_seconds_count{a="1"} 1
`
	if got := exposition(t, reg); got != want {
		t.Fatalf("registered:\n%s\nwant:\n%s", got, want)
	}
}

// Without a Registerer the collectors work and nothing fails.
func TestInstrumentsWithoutRegisterer(t *testing.T) {
	in := telemetry.NewInstruments(nil)
	c := in.Counter("tidemark_test_c_total", "C.")
	c.Inc()
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, c); got != 1 {
		t.Fatalf("counter: got %v, want 1", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// exposition is reg's text exposition.
func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// Every process's registry says which build it runs.
func TestRegistryHasBuildInfo(t *testing.T) {
	reg := telemetry.NewRegistry(telemetry.Pipeline{Namespace: "catalog", Topic: "tidemark.invalidations"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	b := telemetry.BuildInfo()
	for _, mf := range mfs {
		if mf.GetName() != "tidemark_build_info" {
			continue
		}
		m := mf.GetMetric()
		if len(m) != 1 || m[0].GetGauge().GetValue() != 1 {
			t.Fatalf("tidemark_build_info: %v, want one series of value 1", m)
		}
		got := map[string]string{}
		for _, l := range m[0].GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		want := map[string]string{"version": b.Version, "revision": b.Revision, "goversion": b.GoVersion,
			"cache_namespace": "catalog", "topic": "tidemark.invalidations"}
		if len(got) != len(want) || got["version"] != want["version"] || got["revision"] != want["revision"] || got["goversion"] != want["goversion"] || got["goversion"] == "" ||
			got["cache_namespace"] != want["cache_namespace"] || got["topic"] != want["topic"] {
			t.Fatalf("tidemark_build_info labels %v, want %v", got, want)
		}
		return
	}
	t.Fatal("NewRegistry has no tidemark_build_info")
}

// Every series a package registers on a process's registry says which
// pipeline (cache namespace, topic) the process belongs to, so the series of
// two namespaces' processes stay apart in one Prometheus.
func TestRegistryLabelsEverySeriesWithItsPipeline(t *testing.T) {
	reg := telemetry.NewRegistry(telemetry.Pipeline{Namespace: "catalog-v2", Topic: "tidemark.invalidations.v2"})
	in := telemetry.NewInstruments(reg)
	in.CounterVec("tidemark_test_things_total", "Things.", "kind").WithLabelValues("x").Inc()
	if err := in.Err(); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if got["cache_namespace"] != "catalog-v2" || got["topic"] != "tidemark.invalidations.v2" {
				t.Fatalf("%s%v: want cache_namespace=catalog-v2 and topic=tidemark.invalidations.v2", mf.GetName(), got)
			}
			seen++
		}
	}
	if seen < 10 {
		t.Fatalf("only %d series gathered", seen)
	}
	// An empty part of the pipeline adds no empty label.
	bare := telemetry.NewRegistry(telemetry.Pipeline{})
	mfs, _ = bare.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cache_namespace" || l.GetName() == "topic" {
					t.Fatalf("%s has %s=%q without a pipeline", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}
