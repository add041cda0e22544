package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Chart is what WriteChart saves: an svgchart line or bar chart.
type Chart interface{ String() string }

// WriteChart saves chart as an SVG file at path (creating its directory) and
// names the file on w, under the report's table. An empty path saves
// nothing.
func WriteChart(path string, chart Chart, w io.Writer) error {
	if path == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	if err := os.WriteFile(path, []byte(chart.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("bench: chart: %w", err)
	}
	_, err := fmt.Fprintf(w, "\nchart: %s\n", path)
	return err
}

// Result is what every harness's Run returns.
type Result interface{ WriteTable(io.Writer) error }

// Print writes res's table to w and, when svg names a file, saves chart(res)
// there and names it under the table.
func Print[R Result, C Chart](w io.Writer, res R, svg string, chart func(R) C) error {
	if err := res.WriteTable(w); err != nil {
		return err
	}
	return WriteChart(svg, chart(res), w)
}

// RateTick formats a throughput axis value: 950, 12k, 1.5M.
func RateTick(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 3, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'g', 3, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// MsTick formats a latency axis value given in milliseconds (seconds from
// 1,000 ms on).
func MsTick(v float64) string {
	if v >= 1000 {
		return strconv.FormatFloat(v/1000, 'g', 3, 64) + " s"
	}
	return strconv.FormatFloat(v, 'g', 3, 64) + " ms"
}

// MsOf is d in milliseconds, the unit of the latency charts.
func MsOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// RatioNote is ours/ceiling as a chart note ("0.40x"); empty without a
// ceiling.
func RatioNote(ours, ceiling float64) string {
	if !(ceiling > 0) {
		return ""
	}
	return fmt.Sprintf("%.2fx", ours/ceiling)
}
