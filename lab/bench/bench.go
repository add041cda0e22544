// Package bench holds what every `tidemark-lab bench` harness shares: quantiles
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
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/tidemark/tidemark/lab/localserver"
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

// Deps is what every harness's Run is given besides its Config
// (lab/bench/<name>.Deps is this type).
type Deps struct {
	Log      *slog.Logger // progress and the stages' own logs; nil: discarded
	Progress io.Writer    // a line per step while it runs, for a terminal; nil: none
}

// OrDefaults is d with a nil Log or Progress replaced by one that discards.
func (d Deps) OrDefaults() Deps {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Progress == nil {
		d.Progress = io.Discard
	}
	return d
}

// PrivateRedis is url, or when url is empty a private redis-server started
// for the run (what names the harness in errors); stop removes it.
func PrivateRedis(url, what string) (_ string, stop func(), _ error) {
	if url != "" {
		return url, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "tidemark-bench-redis-")
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", what, err)
	}
	srv, err := localserver.NewRedis(localserver.RedisConfig{Dir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("%s: start redis-server: %w", what, err)
	}
	return srv.URL(), srv.Remove, nil
}
