package memorybench_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/memorybench"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A small run measures every arm on a real redis-server: each key costs at
// least its payload, a copy of a hot key about what its entry costs, and the
// report carries every row, the goal line and the chart.
func TestMemoryBenchSmoke(t *testing.T) {
	r := testenv.StartRedis(t)
	cfg := memorybench.DefaultConfig()
	cfg.RedisURL, cfg.Entries, cfg.HotKeys, cfg.Payloads, cfg.Workers = r.URL(), 2000, 100, []int{256, 1536}, 4
	svgPath := filepath.Join(t.TempDir(), "memory.svg")
	res, err := memorybench.Run(testenv.Context(t, 90*time.Second), cfg, memorybench.Deps{Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 {
		t.Fatalf("rows: %d, want one per payload (2)", len(res.Rows))
	}
	for _, row := range res.Rows {
		p := float64(row.Payload)
		for name, u := range map[string]memorybench.Usage{"SET": row.Set, "SET PX": row.SetPX, "entry": row.Entry, "listpack entry": row.Listpack} {
			if u.Info < p || u.Sampled < p {
				t.Errorf("%d-byte payload: %s costs %.0f bytes per key (MEMORY USAGE %.0f), want at least the payload", row.Payload, name, u.Info, u.Sampled)
			}
		}
		if row.Entry.Info <= row.Set.Info {
			t.Errorf("%d-byte payload: entry %.0f bytes, plain SET %.0f: an entry also holds its version and deadlines", row.Payload, row.Entry.Info, row.Set.Info)
		}
		if row.Entry.Encoding != "hashtable" || row.Listpack.Encoding != "listpack" {
			t.Errorf("%d-byte payload: encodings %q and %q, want hashtable (server default) and listpack (raised)", row.Payload, row.Entry.Encoding, row.Listpack.Encoding)
		}
		if perCopy := row.Replicas / float64(cfg.Replicas); perCopy < 0.8*row.Entry.Info || perCopy > 1.5*row.Entry.Info {
			t.Errorf("%d-byte payload: a replica copy costs %.0f bytes, entry %.0f: want about the same", row.Payload, perCopy, row.Entry.Info)
		}
		if row.Invalidated <= 0 || row.Invalidated > p {
			t.Errorf("%d-byte payload: an invalidation adds %.0f bytes to an entry, want a few fields' worth", row.Payload, row.Invalidated)
		}
	}
	if res.Floor.Info <= 0 || res.Floor.Info > 400 {
		t.Errorf("floor-only key: %.0f bytes, want a small hash", res.Floor.Info)
	}
	var out strings.Builder
	if err := bench.Print(&out, res, svgPath, memorybench.Chart); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1,536 B |", "hot key: 3 copies", "floor-only key", "Goal: entry overhead over a plain SET <= 30 % at 1,536 B", "chart: " + svgPath} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if d := svgcharttest.Parse(t, string(svg)); d.Count("bar", "tidemark entry") != 2 {
		t.Errorf("chart has %d tidemark entry bars, want 2", d.Count("bar", "tidemark entry"))
	}
	cfg.Payloads = nil
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Payloads:") {
		t.Errorf("Validate(no payloads) = %v", err)
	}
}
