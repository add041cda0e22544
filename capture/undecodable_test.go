package capture_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// No row stops capture (issue 37, reproduction 4). On tidemark's own
// catalog.items with its constraints gone (a restore without them, or a
// table adopted before adopt added them), a NULL, a zero and a negative
// version each become a hard-delete event of their key (appliers purge it),
// an empty tenant a reset marker on every partition; capture keeps
// streaming, the next good change of the same row is sent, and the slot is
// confirmed past them all.
func TestUndecodableRowsDoNotStopCapture(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	exec(t, conn, `ALTER TABLE catalog.items ALTER COLUMN version DROP NOT NULL, DROP CONSTRAINT items_version_check`)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'null', 1), ('t', 'zero', 1), ('t', 'neg', 1)")
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "UPDATE catalog.items SET version = NULL, display = '\"oops\"' WHERE item_id = 'null'")
	exec(t, conn, "BEGIN; SET LOCAL session_replication_role = replica; UPDATE catalog.items SET version = 0 WHERE item_id = 'zero'; UPDATE catalog.items SET version = -5 WHERE item_id = 'neg'; COMMIT")
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('', 'no-tenant', 1)")
	exec(t, conn, "UPDATE catalog.items SET version = 7 WHERE item_id = 'null'")
	var s string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	end, err := schema.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}

	testenv.Eventually(t, 60*time.Second, "every bad row turned into its safe action, the next change sent, the slot confirmed past them", func() error {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("capture exited on a bad row: %v", err)
		default:
		}
		recs := readTopic(t, k.Brokers, cfg.Relay.Topic)
		purged := map[string]bool{}
		resets := map[int32]bool{}
		next := false
		for _, rec := range recs {
			switch ev := rec.ev.(type) {
			case *schema.Change:
				if ev.Op == schema.OpDelete && ev.Version == 0 {
					purged[ev.Key()] = true
				}
				if ev.Key() == "t/null" && ev.Version == 7 && ev.Op == schema.OpUpsert {
					next = true
				}
			case *schema.Reset:
				if ev.Reason == capture.ReasonUndecodableRow {
					resets[rec.partition] = true
				}
			}
		}
		for _, k := range []string{"t/null", "t/zero", "t/neg"} {
			if !purged[k] {
				return errorf("no purge (hard-delete event) for %s", k)
			}
		}
		if len(resets) != testPartitions {
			return errorf("undecodable_row reset on %d of %d partitions", len(resets), testPartitions)
		}
		if !next {
			return errorf("the row's next good change (t/null@7) is not on the topic")
		}
		if got := slotLSN(t, conn, cfg.Slot); got < end {
			return errorf("slot confirmed %s, want past %s", got, end)
		}
		return nil
	})
	if got := testenv.Metric(t, r.reg, "tidemark_capture_undecodable_rows_total", "action", "purge"); got != 3 {
		t.Fatalf("undecodable rows purged = %v, want 3", got)
	}
	if got := testenv.Metric(t, r.reg, "tidemark_capture_undecodable_rows_total", "action", "reset"); got != 1 {
		t.Fatalf("undecodable rows reset = %v, want 1", got)
	}
}
