package capture_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// Values changed by the table's definition rather than by a row change
// stream nothing: a rewrite (ALTER COLUMN ... TYPE ... USING) changes
// every row's value in place while heartbeats go on. Capture sends a
// table_changed reset timed after it and streams on; the same while
// capture is stopped is found at its next start; and a column added, a
// renamed label of a column's enum type and row-level security turned on,
// which change what is read without a rewrite, are one too.
// A definition left alone sends none.
func TestTableChangeResets(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	now := func() time.Time {
		var at time.Time
		if err := conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	tableResets := func() map[int32][]*schema.Reset {
		return resetsWith(readTopic(t, k.Brokers, cfg.Relay.Topic), func(r *schema.Reset) bool { return r.Reason == capture.ReasonTableChanged })
	}
	waitResets := func(what string, n int, after time.Time) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, what, func() error {
			rs := tableResets()
			for p := range int32(testPartitions) {
				if len(rs[p]) != n || !rs[p][n-1].ResetTime.After(after) {
					return fmt.Errorf("partition %d: %d table_changed resets, want %d after %s", p, len(rs[p]), n, after.Format(time.RFC3339Nano))
				}
			}
			return nil
		})
	}

	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('t', 'a', 1, '{\"v\": 1}')")
	waitItem(t, k, cfg.Relay.Topic, "t", "a", 1)
	// Beats with the definition left alone send no reset.
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'b', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "b", 1)
	beats := testenv.Metric(t, r.reg, "tidemark_capture_heartbeats_total")
	testenv.Eventually(t, 30*time.Second, "three more heartbeats", func() error {
		if got := testenv.Metric(t, r.reg, "tidemark_capture_heartbeats_total"); got < beats+3 {
			return fmt.Errorf("%v heartbeats, want %v", got, beats+3)
		}
		return nil
	})
	if rs := tableResets(); len(rs) != 0 {
		t.Fatalf("table_changed resets with the definition unchanged: %v", rs)
	}

	// While streaming: every row's display rewritten in place.
	before := now()
	exec(t, conn, `ALTER TABLE catalog.items ALTER COLUMN display TYPE jsonb USING coalesce(display, '{}') || '{"rewritten": true}'`)
	waitResets("a table_changed reset after the rewrite", 1, before)
	if got := testenv.Metric(t, r.reg, "tidemark_capture_resets_total", "reason", capture.ReasonTableChanged); got != 1 {
		t.Fatalf("resets_total{reason=table_changed} = %v, want 1", got)
	}
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'c', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "c", 1)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// While stopped.
	before = now()
	exec(t, conn, `ALTER TABLE catalog.items ALTER COLUMN display TYPE jsonb USING display - 'rewritten'`)
	r = start(t, cfg)
	r.waitReady(t)
	waitResets("a table_changed reset at the start after a rewrite while stopped", 2, before)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'd', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "d", 1)

	// An enum label renamed: no rewrite, no row change, another value.
	exec(t, conn, "CREATE TYPE catalog.tablechange_colour AS ENUM ('red', 'blue')")
	before = now()
	exec(t, conn, "ALTER TABLE catalog.items ADD COLUMN colour catalog.tablechange_colour")
	waitResets("a table_changed reset once a column was added", 3, before)
	before = now()
	exec(t, conn, "ALTER TYPE catalog.tablechange_colour RENAME VALUE 'red' TO 'crimson'")
	waitResets("a table_changed reset once a label of a column's enum was renamed", 4, before)

	// Row-level security: what serve's role reads changes, no row does.
	before = now()
	exec(t, conn, "CREATE POLICY tablechange_visible ON catalog.items USING (tenant_id <> 'hidden')")
	exec(t, conn, "ALTER TABLE catalog.items ENABLE ROW LEVEL SECURITY")
	waitResets("a table_changed reset once row-level security was enabled", 5, before)
	exec(t, conn, "ALTER TABLE catalog.items DISABLE ROW LEVEL SECURITY")
	exec(t, conn, "DROP POLICY tablechange_visible ON catalog.items")
	_ = r.wait(t)
}
