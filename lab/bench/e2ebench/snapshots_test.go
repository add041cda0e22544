package e2ebench

import (
	"strings"
	"testing"
)

// The snapshot count is read from capture's exposition by exact name, over
// its labelled series (the process labels each with the topic): a longer
// name sharing its prefix, the HELP and TYPE lines do not count, and a
// build without the metric reads as unknown, not as zero snapshots.
func TestCounterInReadsTheNamedCounter(t *testing.T) {
	const text = `# HELP tidemark_capture_visibility_checks_total Snapshots taken.
# TYPE tidemark_capture_visibility_checks_total counter
tidemark_capture_visibility_checks_total_created 1.7e+09
tidemark_capture_visibility_checks_total{topic="tidemark.e2e.x"} 1200
tidemark_capture_visibility_checks_total 34
tidemark_capture_invisible_wait_seconds_total 0.5
`
	v, ok, err := counterIn(strings.NewReader(text), checksMetric)
	if err != nil || !ok || v != 1234 {
		t.Fatalf("counterIn = %v, %v, %v; want 1234, true, nil", v, ok, err)
	}
	v, ok, err = counterIn(strings.NewReader("tidemark_capture_invisible_wait_seconds_total 0.5\n"), checksMetric)
	if err != nil || ok {
		t.Fatalf("counterIn without the metric = %v, %v, %v; want ok false (unknown), no error", v, ok, err)
	}
}
