package testenv

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric is the value of the counter or gauge (a histogram's sample count)
// name in g, summed over the series whose labels include every name/value
// pair in labels. It fails the test when no series matches: a renamed
// metric or label must not read as 0.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, err := metric(g, name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func metric(g prometheus.Gatherer, name string, labels ...string) (float64, error) {
	if len(labels)%2 != 0 {
		return 0, fmt.Errorf("testenv.Metric(%s): labels must be name/value pairs, got %q", name, labels)
	}
	mfs, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("testenv.Metric(%s): gather: %w", name, err)
	}
	var names []string
	total, found := 0.0, false
	for _, mf := range mfs {
		names = append(names, mf.GetName())
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool {
					return lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}) {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				total += m.Counter.GetValue()
			case m.Gauge != nil:
				total += m.Gauge.GetValue()
			case m.Histogram != nil:
				total += float64(m.Histogram.GetSampleCount())
			default:
				continue series
			}
			found = true
		}
	}
	if !found {
		return 0, fmt.Errorf("testenv.Metric: no series %s%s (registered: %s)", name, labelString(labels), strings.Join(names, ", "))
	}
	return total, nil
}

func labelString(labels []string) string {
	if len(labels) == 0 {
		return ""
	}
	var parts []string
	for i := 0; i+1 < len(labels); i += 2 {
		parts = append(parts, labels[i]+"="+fmt.Sprintf("%q", labels[i+1]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
