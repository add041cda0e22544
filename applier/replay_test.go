package applier

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// After FLUSHALL, a replay from before the records restores every floor,
// counts what it did, writes no watermark, and a second replay is all
// duplicates (idempotent).
func TestReplayRestoresFloorsAfterFlushall(t *testing.T) {
	r := newRig(t, 3)
	since := time.Now().Add(-time.Second)
	final := r.produceChanges("r", 3000, 250)
	r.resolved(time.Now())
	if err := r.rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	replay := func() ReplaySummary {
		cfg := r.replayConfig(since)
		rp, err := NewReplay(cfg, Deps{Cache: r.cache, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		sum, err := rp.Run(testenv.Context(t, 60*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if done, total := rp.Progress(); done != total || total != 3003 {
			t.Fatalf("progress %d/%d, want 3003/3003", done, total)
		}
		return sum
	}
	sum := replay()
	if err := r.checkFloors(final); err != nil {
		t.Fatal(err)
	}
	if sum.Total() != 3000 || sum.Applied != 250 || sum.DLQ != 0 || sum.Records != 3003 {
		t.Fatalf("summary %+v", sum)
	}
	if n, _ := r.rdb.Exists(context.Background(), schema.WatermarkKey(testNS)).Result(); n != 0 {
		t.Fatal("replay wrote the watermark hash")
	}
	again := replay()
	if again.Applied != 0 || again.Duplicate != 250 {
		t.Fatalf("second replay %+v, want no applied and 250 duplicates", again)
	}
}

// The CLI: `tidemark replay --since` restores floors, prints plain progress
// lines when not on a terminal, and exits 0 with a summary.
func TestReplayCommand(t *testing.T) {
	r := newRig(t, 2)
	final := r.produceChanges("cli", 500, 50)
	if err := r.rdb.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"replay"}, proc.KafkaArgs(r.brokers, r.replayKafka)...)
	out, err := exec.Command(testenv.Binary(t), append(args, "--redis", r.redis.URL(),
		"--topic", r.topic, "--since", "1m", "--partitions", "0,1")...).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark replay: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "replayed 500 records") || !strings.Contains(string(out), "applied 50, duplicate 0, older 450") {
		t.Fatalf("summary missing:\n%s", out)
	}
	if err := r.checkFloors(final); err != nil {
		t.Fatal(err)
	}
	// Flags are checked all at once: exit 2, each named.
	bad := exec.Command(testenv.Binary(t), "replay", "--since", "yesterday")
	out, _ = bad.CombinedOutput()
	if code := bad.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "--kafka") ||
		!strings.Contains(string(out), "--redis") || !strings.Contains(string(out), "--since") {
		t.Fatalf("bad flags: exit %d\n%s", code, out)
	}
}
