package capture_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// The table dropped from the publication and added again while capture
// streams: the change made in between is never streamed, while heartbeats
// go on. Capture sends a publication_changed reset timed after it and
// streams on; the same while capture is stopped is found at its next
// start, and a replica identity changed while it streams too; and the
// table dropped for good ends capture with the preflight's error, after
// the reset.
func TestPublicationChangeResets(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	var cols string
	if err := conn.QueryRow(context.Background(), `SELECT array_to_string(attnames, ', ') FROM pg_publication_tables
		WHERE pubname = 'tidemark' AND schemaname = 'catalog' AND tablename = 'items'`).Scan(&cols); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time {
		var at time.Time
		if err := conn.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	publicationResets := func() map[int32][]*schema.Reset {
		return resetsWith(readTopic(t, k.Brokers, cfg.Relay.Topic), func(r *schema.Reset) bool { return r.Reason == capture.ReasonPublicationChanged })
	}
	// A reset after each change on every partition. A beat between a DROP
	// and the ADD that follows sees the publication changed twice, so a
	// change may reset twice: the count is not exact.
	waitResets := func(what string, after time.Time) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, what, func() error {
			rs := publicationResets()
			for p := range int32(testPartitions) {
				if n := len(rs[p]); n == 0 || !rs[p][n-1].ResetTime.After(after) {
					return fmt.Errorf("partition %d: %d publication_changed resets, none after %s", p, n, after.Format(time.RFC3339Nano))
				}
			}
			return nil
		})
	}

	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'a', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "a", 1)

	// While streaming: dropped, a change, added again.
	exec(t, conn, "ALTER PUBLICATION tidemark DROP TABLE catalog.items")
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'lost', 1)")
	lost := now()
	exec(t, conn, "ALTER PUBLICATION tidemark ADD TABLE catalog.items ("+cols+")")
	waitResets("a publication_changed reset after the change the publication left out", lost)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'b', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "b", 1)
	if got := testenv.Metric(t, r.reg, "tidemark_capture_resets_total", "reason", capture.ReasonPublicationChanged); got < 1 {
		t.Fatalf("resets_total{reason=publication_changed} = %v, want at least 1", got)
	}
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// While stopped.
	exec(t, conn, "ALTER PUBLICATION tidemark DROP TABLE catalog.items")
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'lost2', 1)")
	lost = now()
	exec(t, conn, "ALTER PUBLICATION tidemark ADD TABLE catalog.items ("+cols+")")
	r = start(t, cfg)
	r.waitReady(t)
	waitResets("a publication_changed reset at the start after a change while stopped", lost)
	_ = r.wait(t)

	// The replica identity changed while streaming (here to one that still
	// covers the key): a reset, and capture streams on.
	r = start(t, cfg)
	r.waitReady(t)
	before := now()
	exec(t, conn, "ALTER TABLE catalog.items REPLICA IDENTITY FULL")
	waitResets("a publication_changed reset once the replica identity changed", before)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'c', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "c", 1)
	_ = r.wait(t)

	// Dropped for good while streaming: a reset, then the preflight's error.
	r = start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "ALTER PUBLICATION tidemark DROP TABLE catalog.items")
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'lost3', 1)")
	lost = now()
	waitResets("a publication_changed reset once the table left the publication", lost)
	select {
	case err := <-r.done:
		r.done <- err
		if !errors.Is(err, capture.ErrPreflight) || !strings.Contains(err.Error(), "does not include catalog.items") {
			t.Fatalf("Run = %v, want the preflight's error: the publication no longer includes the table", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("capture still runs 60s after the table left the publication")
	}
}
