package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestQuantileNearestRank(t *testing.T) {
	xs := make([]int, 100)
	for i := range xs {
		xs[i] = i + 1
	}
	for _, c := range []struct {
		q    float64
		want int
	}{{0, 1}, {0.5, 51}, {0.99, 100}, {1, 100}} {
		if got := Quantile(xs, c.q); got != c.want {
			t.Errorf("Quantile(1..100, %v) = %d, want %d", c.q, got, c.want)
		}
	}
	if got := Quantile([]int(nil), 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %d, want 0", got)
	}
}

func TestMedian(t *testing.T) {
	in := []float64{5, 1, 3}
	if got := Median(in); got != 3 {
		t.Errorf("Median(5,1,3) = %v, want 3", got)
	}
	if in[0] != 5 {
		t.Errorf("Median sorted its argument: %v", in)
	}
	if got := Median([]time.Duration{4, 1, 3, 2}); got != 2 {
		t.Errorf("Median(4,1,3,2) = %v, want 2 (mean of 2 and 3, truncated)", got)
	}
}

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 200; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	got := Summarize(s)
	want := Latency{N: 200, P50: 101 * time.Millisecond, P99: 199 * time.Millisecond, Max: 200 * time.Millisecond}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
}

func TestParseRedisBenchmarkCSV(t *testing.T) {
	out := []byte(`"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
"PING_INLINE","1000.00","0.100","0.050","0.095","0.150","0.250","1.000"
"EVALSHA","250000.00","0.300","0.100","0.287","0.500","0.911","3.000"
`)
	r, err := ParseRedisBenchmarkCSV(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.RPS != 250000 || r.P50 != 287*time.Microsecond || r.P99 != 911*time.Microsecond {
		t.Errorf("parsed %+v", r)
	}
	if _, err := ParseRedisBenchmarkCSV([]byte(`"test","rps"` + "\n" + `"X","1"` + "\n")); err == nil {
		t.Error("output without latency columns parsed")
	}
}

func TestTableMarkdown(t *testing.T) {
	tb := Table{Header: []string{"a", "b"}}
	tb.Add("1", "2")
	want := "| a | b |\n|---|---|\n| 1 | 2 |\n"
	if got := tb.Markdown(); got != want {
		t.Errorf("Markdown =\n%s\nwant\n%s", got, want)
	}
}

type svgString string

func (s svgString) String() string { return string(s) }

// WriteChart creates the chart's directory, writes the file and names it
// under the report; without a path it writes nothing.
func TestWriteChart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "docs", "bench", "x.svg")
	var out strings.Builder
	if err := WriteChart(path, svgString("<svg/>"), &out); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "<svg/>\n" {
		t.Errorf("file: %q, %v", b, err)
	}
	if out.String() != "\nchart: "+path+"\n" {
		t.Errorf("report line %q", out.String())
	}
	out.Reset()
	if err := WriteChart("", svgString("<svg/>"), &out); err != nil || out.Len() != 0 {
		t.Errorf("empty path: %v, wrote %q", err, out.String())
	}
}

func TestRateTick(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 950: "950", 12_000: "12k", 307_956: "308k", 1_500_000: "1.5M"} {
		if got := RateTick(v); got != want {
			t.Errorf("RateTick(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestMsTick(t *testing.T) {
	for v, want := range map[float64]string{0.5: "0.5 ms", 20: "20 ms", 1000: "1 s", 2500: "2.5 s"} {
		if got := MsTick(v); got != want {
			t.Errorf("MsTick(%v) = %q, want %q", v, got, want)
		}
	}
}
