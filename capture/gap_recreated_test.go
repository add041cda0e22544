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
	"github.com/tidemark/tidemark/schema"
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

// The state topic's record of the slot gone while the topic has history
// and the slot carried on: what changed while capture was stopped (here
// the table rewritten in place) cannot be compared, so the start resets
// (state_missing). Deleted, or expired under a retention an operator gave
// the state topic (its records deleted up to its end): the same, and
// without waiting on a read of nothing.
func TestGapWhenStateMissing(t *testing.T) {
	t.Parallel()
	dsn, k, cfg := newRig(t, testenv.SharedPostgres(t))
	conn := connect(t, dsn)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	state := cfg.Relay.Topic + ".capture"

	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('t', 'a', 1, '{}')")
	waitItem(t, k, cfg.Relay.Topic, "t", "a", 1)
	if err := r.wait(t); err != nil {
		t.Fatalf("Run: %v", err)
	}

	for i, lose := range []struct {
		how string
		do  func(ctx context.Context) error
	}{
		{"deleted", func(ctx context.Context) error {
			_, err := adm.DeleteTopics(ctx, state)
			return err
		}},
		{"expired", func(ctx context.Context) error {
			// As an operator's retention would: Kafka deletes records of
			// a topic that deletes, not of one that only compacts.
			del := "delete"
			cr, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: &del}}, state)
			if err == nil {
				_, err = cr.On(state, nil)
			}
			if err != nil {
				return err
			}
			ends, err := adm.ListEndOffsets(ctx, state)
			if err != nil {
				return err
			}
			resp, err := adm.DeleteRecords(ctx, kadm.Offsets(ends.Offsets()))
			if err != nil {
				return err
			}
			return resp.Error()
		}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := lose.do(ctx); err != nil {
			cancel()
			t.Fatalf("%s: %v", lose.how, err)
		}
		cancel()
		exec(t, conn, `ALTER TABLE catalog.items ALTER COLUMN display TYPE jsonb USING coalesce(display, '{}') || '{"rewritten": true}'`)
		before := time.Now()
		r = start(t, cfg)
		r.waitReady(t)
		item := "after-" + lose.how
		exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', $1, 1)", item)
		rs := resetsWith(waitItem(t, k, cfg.Relay.Topic, "t", item, 1), func(r *schema.Reset) bool {
			return strings.Contains(r.Reason, capture.ReasonStateMissing)
		})
		for p := range int32(testPartitions) {
			if len(rs[p]) != i+1 || rs[p][i].ResetTime.Before(before.Add(-time.Second)) {
				t.Fatalf("state %s: partition %d: resets %+v, want %d for %s, the last after %s", lose.how, p, rs[p], i+1, capture.ReasonStateMissing, before)
			}
		}
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
	}
}
