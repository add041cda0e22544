package readsbench_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/readsbench"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The benchmark runs end to end on a small scale through a real serve
// process and reports what the two features promise, by Redis's own
// counters: a page read as one batch costs Redis about one round trip (with
// L1 off, where every item reaches Redis), a quarter of what its items'
// single GETs cost at most; and a hot key's copy reads share the per-key
// coalescing (with L1 off, well under one copy read per GET, and about the
// commands per GET of replicas off, not several times them).
func TestRunBenchSmoke(t *testing.T) {
	cfg := readsbench.DefaultConfig()
	cfg.PG, cfg.Redis, cfg.Binary = testenv.SharedPostgres(t).MigratedDatabase(t), testenv.StartRedis(t).URL(), testenv.Binary(t)
	cfg.Items, cfg.Pages, cfg.Duration, cfg.Rounds = 400, 4, time.Second, 1
	cfg.HotGETs, cfg.HotRounds, cfg.HotWorkers = 4000, 1, 16
	res, err := readsbench.Run(testenv.Context(t, 5*time.Minute), cfg, readsbench.Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	svgPath := filepath.Join(t.TempDir(), "reads.svg")
	var out strings.Builder
	if err := bench.Print(&out, res, svgPath, readsbench.Chart); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	t.Log(report)

	if len(res.Pages) != 4 {
		t.Fatalf("%d page rows, want 4 (L1 default and off, single and batch):\n%s", len(res.Pages), report)
	}
	var single, batch readsbench.PageRow
	for _, row := range res.Pages {
		if row.Errors != 0 || row.Pages == 0 || row.ItemRate <= 0 {
			t.Errorf("page row %+v: want pages answered, every item 200", row)
		}
		if !row.L1 && row.Batch {
			batch = row
		} else if !row.L1 {
			single = row
		}
	}
	// A page's lookups are one round trip: 1.08 per page measured on a
	// loaded box (serve's own beats are counted too). Twenty lookups sent
	// apart are at least two even when serve's lookup batching joins them
	// (the first goes alone, the rest queue behind it), as the single GETs
	// show (3 per page on the same box).
	if perPage := batch.RedisReads * float64(cfg.BatchSize); perPage > 1.5 || batch.RedisReads >= single.RedisReads {
		t.Errorf("L1 off: %.2f Redis round trips per page of %d in one batch GET (%.2f as single GETs): want one per page",
			perPage, cfg.BatchSize, single.RedisReads*float64(cfg.BatchSize))
	}

	if len(res.Hot) != 4 {
		t.Fatalf("%d hot-key rows, want 4:\n%s", len(res.Hot), report)
	}
	var off, on readsbench.HotRow
	for _, row := range res.Hot {
		if row.Errors != 0 || row.GETs != int64(cfg.HotGETs) {
			t.Errorf("hot-key row %+v: want %d GETs, every one 200", row, cfg.HotGETs)
		}
		if !row.L1 && row.Replicas {
			on = row
		} else if !row.L1 {
			off = row
		}
	}
	// Without the shared resolution every GET is a copy read of its own
	// (0.99 per GET measured, the rest fallbacks); with it, a copy read
	// answers every GET waiting on the key: 0.07 per GET on the loaded box,
	// more on an idle one where fewer GETs wait, but never near one.
	if on.Copies == 0 || on.Copies > 0.8 || on.Commands > 2.5*off.Commands {
		t.Errorf("L1 off, hot key: replicas on %.3f copy reads and %.3f Redis commands per GET, off %.3f commands: want copies read (some), coalesced (well under one per GET) and commands per GET near replicas off's",
			on.Copies, on.Commands, off.Commands)
	}
	for _, want := range []string{"### A page of 20 items", "### One hot key", "Batch against singles, same run", "replicas on against off, same run"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatalf("chart not written: %v", err)
	}
	if d := svgcharttest.Parse(t, string(svg)); d.Count("bar", "one batch GET of 20") != 2 {
		t.Errorf("chart has %d batch bars, want 2 (the round and the median)", d.Count("bar", "one batch GET of 20"))
	}
	cfg.BatchSize = 101
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "BatchSize: must be 1 to 100") {
		t.Errorf("Validate(BatchSize=101) = %v", err)
	}
}
