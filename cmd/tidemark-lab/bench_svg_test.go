package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/testenv"
)

// Every benchmark that has a chart (lab/bench/<name>.Chart) offers
// --svg to write it, as BENCHMARKS.md says: a config refactor once dropped
// bench warm's.
func TestChartingBenchesHaveSVGFlag(t *testing.T) {
	cmds, err := cli.Commands(&root{})
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, c := range cmds {
		has[c.Path] = c.Binder.FlagOf("svg") != nil
	}
	for _, name := range []string{"bench capture", "bench cache", "bench apply", "bench serve", "bench e2e", "bench warm", "bench hotkey", "bench memory", "bench reads"} {
		if !has[name] {
			t.Errorf("tidemark-lab %s has no --svg flag", name)
		}
	}
}

// The benchmarks that run in seconds on a small scale are run through the
// command line with --svg: the file it names must be written, hold a chart
// with bars of each series, and be named under the table. (The others need
// Postgres or a whole pipeline; their charts are tested in lab/bench.)
func TestBenchSVGFlagWritesTheChart(t *testing.T) {
	redis := testenv.StartRedis(t)
	for _, tc := range []struct {
		name   string
		args   []string
		series []string
	}{
		{"cache", []string{"bench", "cache", "--redis", redis.URL(), "--keys", "2000", "--batch", "100", "--lookups", "200",
			"--rounds", "1", "--clients", "4", "--pipeline", "10"}, []string{"tidemark InvalidateBatch"}},
		{"apply", []string{"bench", "apply", "--events", "2000", "--keys", "200", "--partitions", "2", "--rate", "200", "--duration", "1s"},
			[]string{"tidemark applier replay"}},
		{"hotkey", []string{"bench", "hotkey", "--masters", "3", "--replicas", "2", "--workers", "4", "--processes", "2",
			"--duration", "1s", "--rounds", "1", "--cold-rounds", "0"}, []string{"replicas off", "replicas N=2"}},
		{"memory", []string{"bench", "memory", "--redis", redis.URL(), "--entries", "1000", "--hot-keys", "50", "--payloads", "256,1536"},
			[]string{"plain SET", "tidemark entry"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "charts", tc.name+".svg")
			code, stdout, stderr := runCLI(t, append(tc.args, "--svg", path)...)
			if code != 0 {
				t.Fatalf("tidemark %s: want exit 0, got %d\nstdout:\n%s\nstderr:\n%s", strings.Join(tc.args, " "), code, stdout, stderr)
			}
			svg, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("--svg %s: want the chart written there, got %v\nstdout:\n%s", path, err, stdout)
			}
			d := svgcharttest.Parse(t, string(svg))
			for _, s := range tc.series {
				if n := d.Count("bar", s); n == 0 {
					t.Errorf("chart %s: want bars of series %q, got none (%d marks in all)", path, s, len(d.Marks))
				}
			}
			if !strings.Contains(stdout, "chart: "+path) {
				t.Errorf("want the report to name the chart (chart: %s), got:\n%s", path, stdout)
			}
		})
	}
}
