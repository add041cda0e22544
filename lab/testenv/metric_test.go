package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMetricFailsOnMissingSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidemark_test_things_total", Help: "h"}, []string{"kind"})
	reg.MustRegister(c)
	c.WithLabelValues("a").Add(2)
	c.WithLabelValues("b").Add(3)
	if v, err := metric(reg, "tidemark_test_things_total"); err != nil || v != 5 {
		t.Errorf("sum over series = %v, %v; want 5", v, err)
	}
	if v, err := metric(reg, "tidemark_test_things_total", "kind", "b"); err != nil || v != 3 {
		t.Errorf("kind=b = %v, %v; want 3", v, err)
	}
	for _, q := range [][]string{{"tidemark_test_renamed_total"}, {"tidemark_test_things_total", "kind", "c"}, {"tidemark_test_things_total", "sort", "a"}} {
		if v, err := metric(reg, q[0], q[1:]...); err == nil {
			t.Errorf("metric(%q) = %v with no error; a missing series must fail", q, v)
		}
	}
}
