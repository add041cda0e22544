package capture_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
)

// The topic recreated (its history gone) while the state topic records an
// earlier run: gap detection no longer needs the topic's history. With the
// slot dropped too, the reset names both reasons.
func TestGapWhenTopicRecreated(t *testing.T) {
	t.Parallel()
	dsn, k, cfg := newRig(t, testenv.SharedPostgres(t))
	conn := connect(t, dsn)

	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'a', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "a", 1)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).DeleteTopics(ctx, cfg.Relay.Topic); err != nil {
		t.Fatal(err)
	}
	exec(t, conn, "SELECT pg_drop_replication_slot($1)", cfg.Slot)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'lost', 1)")
	before := time.Now()
	r = start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'b', 1)")
	rs := resets(waitItem(t, k, cfg.Relay.Topic, "t", "b", 1))
	for p := range int32(testPartitions) {
		if len(rs[p]) != 1 || !strings.Contains(rs[p][0].Reason, capture.ReasonSlotMissing) ||
			!strings.Contains(rs[p][0].Reason, capture.ReasonTopicRecreated) || rs[p][0].ResetTime.Before(before.Add(-time.Second)) {
			t.Fatalf("partition %d: resets %+v, want one for %s and %s after %s", p, rs[p], capture.ReasonSlotMissing, capture.ReasonTopicRecreated, before)
		}
	}
	if got := testenv.Metric(t, r.reg, "tidemark_capture_resets_total", "reason", capture.ReasonTopicRecreated); got != 1 {
		t.Fatalf("resets_total{reason=topic_recreated} = %v, want 1", got)
	}
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
}
