// Package bench holds what every `tidemark bench` harness shares: quantiles
// and medians of measurements, a runner for redis-benchmark (the ceiling
// several stages are measured against) and the Markdown table their reports
// print. Each stage's harness lives in its own subpackage
// (lab/bench/<stage>); the product packages hold no benchmark code.
//
// Every harness has one shape: a Config with DefaultConfig and Validate
// (config.Problems, one error per field), Run(ctx, cfg, Deps) (Result,
// error), Result.WriteTable(w) for the Markdown table with its goals judged,
// and Chart(Result) for the SVG. The Result carries the Config it was run
// with, so the table and the chart need nothing else; the goals live in the
// harness, and `cmd/tidemark` only wires flags into the Config.
//
// Performance goals are ratios to a ceiling measured in the same run on the
// same servers, so a busy or slow box moves both sides (BENCHMARKS.md).
package bench

import (
	"slices"
	"time"
)

// Quantile is the q-quantile (0 <= q <= 1) of sorted by the nearest-rank
// rule used throughout the reports: element min(n-1, floor(q*n)). It is the
// zero value when sorted is empty.
func Quantile[T any](sorted []T, q float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// Number is what Median can average.
type Number interface {
	~int | ~int32 | ~int64 | ~float32 | ~float64
}

// Median is the middle of xs (the mean of the two middle values for an even
// count); xs is not modified. It is 0 for no values.
func Median[T Number](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Latency summarises latency samples.
type Latency struct {
	N             int
	P50, P99, Max time.Duration
}

// Summarize sorts samples in place and returns their summary (zero for no
// samples).
func Summarize(samples []time.Duration) Latency {
	slices.Sort(samples)
	if len(samples) == 0 {
		return Latency{}
	}
	return Latency{N: len(samples), P50: Quantile(samples, 0.50), P99: Quantile(samples, 0.99), Max: samples[len(samples)-1]}
}
