//go:build realkafka

package applier

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/testenv"
)

// Tests only a real Apache Kafka can run (make test-kafka).

func realRig(t *testing.T, partitions int32) *rig {
	t.Helper()
	r := newRig(t, partitions)
	if r.kafka.Real == nil {
		t.Fatalf("the realkafka tests need %s=real", testenv.KafkaEnv)
	}
	return r
}

// With the production session timeout (6 s), a killed applier's
// partitions move to the survivor through Kafka's group coordinator within
// the session timeout plus one rebalance, and their records are applied.
func TestRealRebalanceAfterApplierDeath(t *testing.T) {
	r := realRig(t, 6)
	cfg := r.config()
	cfg.SessionTimeout = DefaultConfig().SessionTimeout
	r.start(cfg, nil)
	p := r.startBinary(cfg.Group, "--session-timeout", cfg.SessionTimeout.String())
	r.waitMembers(cfg.Group, 2)
	final := map[string]int64{}
	r.wave(final, "g", 0, 600, 120)
	r.waitFloors(30*time.Second, final)
	p.Kill()
	killed := time.Now()
	r.wave(final, "g", 100, 600, 120)
	// One rebalance: the survivor's next heartbeat (a third of the session)
	// learns of it, rejoins and syncs; 4 s covers that on a loaded machine.
	bound := cfg.SessionTimeout + 4*time.Second
	r.waitFloors(bound-time.Since(killed), final)
	moved := time.Since(killed)
	r.waitMembers(cfg.Group, 1)
	t.Logf("session timeout %s: the killed applier's partitions were applied by the survivor %s after the kill (bound %s)",
		cfg.SessionTimeout, moved.Round(time.Millisecond), bound)
}

// Retention deleted the oldest segment: a replay from before it says which
// partitions lost records from --since on, raises reset_at to the first
// record kept (no entry observed before it is trusted past its hard
// lifetime) and re-applies what is left. Nothing is skipped silently.
func TestRealReplayAfterRetention(t *testing.T) {
	r := realRig(t, 1)
	ctx := testenv.Context(t, 3*time.Minute)
	s := func(v string) *string { return &v }
	if _, err := r.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Name: "cleanup.policy", Value: s("delete")},
		{Name: "retention.ms", Value: s("60000")},
		{Name: "segment.ms", Value: s("500")},
	}, r.topic); err != nil {
		t.Fatal(err)
	}
	// Old records (timestamps 10 minutes back, past retention), then, after
	// the segment may roll, new ones.
	old := time.Now().Add(-10 * time.Minute)
	var recs []*kgo.Record
	for i := range 50 {
		rec := changeRecord(change{"t1", fmt.Sprintf("old-%d", i), 1}, old)
		rec.Timestamp = old
		recs = append(recs, rec)
	}
	r.produce(r.prod, recs...)
	testenv.Eventually(t, time.Minute, "the old segment rolls and is deleted", func() error {
		r.produce(r.prod, changeRecord(change{"t1", "new", time.Now().UnixNano()}, time.Now()))
		starts, err := r.adm.ListStartOffsets(ctx, r.topic)
		if err != nil {
			return err
		}
		if o, _ := starts.Lookup(r.topic, 0); o.Offset < 50 {
			return fmt.Errorf("log start offset %d", o.Offset)
		}
		return nil
	})
	final := r.produceChanges("kept", 100, 20)

	cfg := r.replayConfig(old.Add(-time.Minute))
	rp, err := NewReplay(cfg, Deps{Cache: r.cache, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := rp.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := sum.Gaps[0]
	if !ok || g.LogStart < 50 || !g.FirstKept.After(old) {
		t.Fatalf("retention gap not reported: %+v", sum.Gaps)
	}
	wm := r.watermark()
	if wm.ResetAt.Before(g.FirstKept.Truncate(time.Millisecond)) || !sum.ResetAt.Equal(wm.ResetAt) {
		t.Fatalf("reset_at %s (summary %s), want at least the first kept record's time %s", wm.ResetAt, sum.ResetAt, g.FirstKept)
	}
	if err := r.checkFloors(final); err != nil {
		t.Fatalf("records kept after the gap not re-applied: %v", err)
	}
	t.Logf("gap: log start %d, first kept %s; reset_at %s", g.LogStart, g.FirstKept.Format(time.RFC3339Nano), wm.ResetAt.Format(time.RFC3339Nano))
}
