package capture_test

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A logical message with the heartbeat prefix that capture did not write
// (any role allowed to emit one can) is skipped and counted: capture keeps
// streaming, and the change committed after it reaches the topic.
func TestForeignHeartbeatMessageIsSkipped(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'after-poison', 1)")
	exec(t, conn, "SELECT pg_logical_emit_message(false, 'tidemark', 'not-a-time')")
	exec(t, conn, "UPDATE catalog.items SET version = 2 WHERE item_id = 'after-poison'")
	testenv.Eventually(t, 60*time.Second, "the update after a malformed heartbeat message in the topic", func() error {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("capture exited on a heartbeat message it did not write: %v", err)
		default:
		}
		for _, rec := range readTopic(t, k.Brokers, cfg.Relay.Topic) {
			if c, ok := rec.ev.(*schema.Change); ok && c.Item == "after-poison" && c.Version == 2 {
				return nil
			}
		}
		return errorf("t/after-poison@2 not in the topic")
	})
	if err := r.c.Ready(t.Context()); err != nil {
		t.Fatalf("capture not streaming after the malformed message: %v", err)
	}
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	skipped := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "tidemark_capture_heartbeats_skipped_total" {
			skipped = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if skipped != 1 {
		t.Fatalf("tidemark_capture_heartbeats_skipped_total = %v, want 1", skipped)
	}
}
