package capture_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// Tombstones keep their version, hard deletes carry version 0, a TRUNCATE
// is one change on every partition, and heartbeat-row mode (for roles that
// may not emit logical messages) still yields resolved markers with
// ts = heartbeat time - margin.
func TestDeleteTruncateAndRowHeartbeat(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	cfg.HeartbeatMode = capture.HeartbeatRow
	cfg.HeartbeatMargin = 300 * time.Millisecond
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	began := time.Now()
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'tomb', 1), ('t', 'gone', 1), ('t', 'x y', 1)")
	exec(t, conn, "UPDATE catalog.items SET version = 2, state = 'deleted' WHERE item_id = 'tomb'")
	exec(t, conn, "DELETE FROM catalog.items WHERE item_id = 'gone'")
	exec(t, conn, "UPDATE catalog.items SET item_id = 'moved', version = 2 WHERE item_id = 'x y'")
	exec(t, conn, "TRUNCATE catalog.items")

	var recs []record
	testenv.Eventually(t, 60*time.Second, "truncate and resolved markers on every partition", func() error {
		recs = readTopic(t, k.Brokers, cfg.Relay.Topic)
		trunc, resolved := map[int32]bool{}, map[int32]bool{}
		for _, rec := range recs {
			switch ev := rec.ev.(type) {
			case *schema.Change:
				if ev.Op == schema.OpTruncate {
					trunc[rec.partition] = true
				}
			case *schema.Resolved:
				resolved[rec.partition] = true
			}
		}
		if len(trunc) != testPartitions || len(resolved) != testPartitions {
			return errorf("truncate on %d partitions, resolved on %d", len(trunc), len(resolved))
		}
		return nil
	})
	want := map[string]schema.Change{
		"t/tomb@1":  {Op: schema.OpUpsert, Version: 1},
		"t/tomb@2":  {Op: schema.OpDelete, Version: 2},
		"t/gone@1":  {Op: schema.OpUpsert, Version: 1},
		"t/gone@0":  {Op: schema.OpDelete, Version: 0},
		"t/x%20y@1": {Op: schema.OpUpsert, Version: 1},
		"t/x%20y@0": {Op: schema.OpDelete, Version: 0}, // its key moved
		"t/moved@2": {Op: schema.OpUpsert, Version: 2},
	}
	got := map[string]bool{}
	for _, rec := range recs {
		switch ev := rec.ev.(type) {
		case *schema.Change:
			if ev.Op == schema.OpTruncate {
				if ev.Tenant != "" || ev.Item != "" || rec.key != schema.MarkerKey(rec.partition) {
					t.Fatalf("truncate %+v keyed %q on partition %d", ev, rec.key, rec.partition)
				}
				continue
			}
			id := ev.Key() + "@" + itoa(ev.Version)
			w, ok := want[id]
			if !ok || w.Op != ev.Op {
				t.Fatalf("unexpected change %s op %s", id, ev.Op)
			}
			if ev.CommitTime.Before(began.Add(-time.Second)) || ev.LSN == 0 || ev.Xid == 0 {
				t.Fatalf("change %s lacks commit metadata: %+v", id, ev)
			}
			got[id] = true
		case *schema.Resolved:
			if ev.ResolvedTime.After(time.Now().Add(-cfg.HeartbeatMargin)) {
				t.Fatalf("resolved time %s is not at least the margin before now", ev.ResolvedTime)
			}
			// The stream it vouches for: the server, the database, the
			// table; what a serve process reading this database expects
			// of the watermark's markers (cache/source.go).
			if want := "/" + conn.Config().Database + "/" + cfg.Table; !strings.HasSuffix(ev.Source, want) || len(ev.Source) == len(want) {
				t.Fatalf("resolved source %q, want <system identifier>%s", ev.Source, want)
			}
			if serves, err := (catalog.Table{Name: cfg.Table}).Source(testenv.Context(t, 10*time.Second), conn); err != nil || serves != ev.Source {
				t.Fatalf("resolved source %q, but a serve process of this table expects %q (%v)", ev.Source, serves, err)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("changes %v, want %v", got, want)
	}
	if testenv.Metric(t, r.reg, "tidemark_capture_heartbeats_total") == 0 || testenv.Metric(t, r.reg, "tidemark_capture_events_total", "op", "truncate") != 1 {
		t.Fatalf("heartbeat or truncate not counted")
	}
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
