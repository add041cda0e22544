package hotkeybench_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/svgchart/svgcharttest"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/hotkeybench"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The benchmark runs end to end on a small scale against a 3-master Cluster:
// every row is printed, with replicas off one master takes all the load, and
// with three copies the split is near even; the chart is written. From cold,
// a key read at 10x the threshold through serve gets copies that serve reads
// (within the round's 30 s: the 10-minute hot set would take a minute).
func TestRunBenchSmoke(t *testing.T) {
	rc := testenv.StartRedisCluster(t, 3)
	cfg := hotkeybench.DefaultConfig()
	cfg.RedisURL, cfg.Workers, cfg.Processes, cfg.Duration, cfg.Rounds = rc.URL(), 6, 2, time.Second, 1
	cfg.ColdRounds, cfg.ColdThreshold, cfg.Binary = 1, 50, testenv.Binary(t)
	svgPath := filepath.Join(t.TempDir(), "hotkey.svg")
	var out strings.Builder
	res, err := hotkeybench.Run(testenv.Context(t, 90*time.Second), cfg, hotkeybench.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.Print(&out, res, svgPath, hotkeybench.Chart); err != nil {
		t.Fatal(err)
	}
	report := out.String()
	spread := map[string]float64{}
	for _, row := range []string{"ceiling: replicas off", "replicas off at 90%", "replicas N=3 at 90%"} {
		m := regexp.MustCompile(`\| ` + regexp.QuoteMeta(row) + `[^|]*\|.*\| ([0-9.]+) \| [0-9]+% \|`).FindStringSubmatch(report)
		if m == nil {
			t.Fatalf("report lacks the row %q:\n%s", row, report)
		}
		spread[row], _ = strconv.ParseFloat(m[1], 64)
	}
	if spread["replicas off at 90%"] < 2.9 || spread["replicas N=3 at 90%"] > 1.5 {
		t.Fatalf("max/avg off %.2f (want ~3), N=3 %.2f (want near 1):\n%s", spread["replicas off at 90%"], spread["replicas N=3 at 90%"], report)
	}
	cold := regexp.MustCompile(`\| 1 \| 500 \| [0-9]+ \| ([0-9.]+) s \| ([0-9.]+) s \|`).FindStringSubmatch(report)
	if cold == nil {
		t.Fatalf("from-cold round: want the manifest published and a read from a copy, timed, got:\n%s", report)
	}
	t.Logf("from cold: manifest after %s s, first copy read after %s s", cold[1], cold[2])
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatalf("chart not written: %v", err)
	}
	if d := svgcharttest.Parse(t, string(svg)); d.Count("bar", "replicas N=3") != 3 {
		t.Errorf("chart has %d N=3 bars, want 3", d.Count("bar", "replicas N=3"))
	}
	cfg.Workers = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "Workers: must be positive") {
		t.Errorf("Validate(Workers=0) = %v", err)
	}
}
