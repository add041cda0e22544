package capture_test

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A commit waiting for a synchronous standby that never answers is flushed
// and decoded, yet invisible to new snapshots. Capture must not send its
// invalidation (nor any resolved marker past it) until the commit is
// visible: a reader meanwhile fills the old version, and an invalidation
// sent earlier would be spent on the floor, which expires (FloorTTL) before
// the commit shows. The stall here outlasts FloorTTL with reads going on.
func TestSyncStandbyStallHoldsInvalidation(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t, testenv.PGConf("synchronous_standby_names", "'ghost'"))
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 's', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "s", 1)

	// The writer waits in SyncRep.
	committed, release := testenv.StallCommit(t, dsn, "UPDATE catalog.items SET version = 2 WHERE tenant_id = 't' AND item_id = 's'")
	stallStart := time.Now()
	stall := cache.DefaultConfig().FloorTTL + 5*time.Second

	// Reads throughout: the source still shows version 1, and Kafka must
	// get neither the version 2 invalidation nor a marker past its commit.
	reads := 0
	for time.Since(stallStart) < stall {
		var v int64
		if err := conn.QueryRow(context.Background(), "SELECT version FROM catalog.items WHERE tenant_id = 't' AND item_id = 's'").Scan(&v); err != nil {
			t.Fatal(err)
		}
		reads++
		if v != 1 {
			t.Fatalf("read version %d during the stall: the commit is visible, the stall is not a stall", v)
		}
		for _, rec := range readTopic(t, k.Brokers, cfg.Relay.Topic) {
			if c, ok := rec.ev.(*schema.Change); ok && c.Version == 2 {
				t.Fatalf("capture sent the version 2 invalidation %s after %s while the commit was invisible to new snapshots (a reader still reads version 1)",
					rec.key, time.Since(stallStart).Round(time.Millisecond))
			}
		}
		select {
		case err := <-committed:
			t.Fatalf("the write returned during the stall: %v", err)
		case <-time.After(2 * time.Second):
		}
	}
	lastMarker := markersBefore(t, k, cfg.Relay.Topic)

	// Release the wait: no synchronous standby any more.
	release()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write did not return after synchronous_standby_names was cleared")
	}
	visible := time.Now()
	recs := waitItem(t, k, cfg.Relay.Topic, "t", "s", 2)
	sent := time.Since(visible)
	var commitLSN schema.LSN
	for _, rec := range recs {
		if c, ok := rec.ev.(*schema.Change); ok && c.Version == 2 {
			commitLSN = c.LSN
		}
	}
	if lastMarker >= commitLSN {
		t.Fatalf("a resolved marker at %s passed the invisible commit at %s during the stall", lastMarker, commitLSN)
	}
	if got := testenv.Metric(t, r.reg, "tidemark_capture_invisible_wait_seconds_total"); got < stall.Seconds()-5 {
		t.Fatalf("tidemark_capture_invisible_wait_seconds_total = %.1f, want about the stall (%s)", got, stall)
	}
	t.Logf("commit invisible for %s (%d source reads saw version 1); its invalidation reached Kafka %s after it became visible",
		visible.Sub(stallStart).Round(time.Millisecond), reads, sent.Round(time.Millisecond))
}

// markersBefore returns the highest LSN of the resolved markers in topic.
func markersBefore(t *testing.T, k *testenv.Kafka, topic string) schema.LSN {
	t.Helper()
	var max schema.LSN
	for _, rec := range readTopic(t, k.Brokers, topic) {
		if m, ok := rec.ev.(*schema.Resolved); ok && m.LSN > max {
			max = m.LSN
		}
	}
	return max
}
