package applier

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// TestMarkerRaisesPartitionCountFirst: a resolved marker names the
// partition count it was fanned out to, and the applier raises the
// watermark's count to it before the marker's own watermark, so W is never
// known over fewer partitions than capture may have placed records on. The
// topic grows from 3 to 4 partitions while the applier's own view (its
// topic interval, a minute here) still says 3; and the group reads the
// topic again then, so p3 is assigned, and W known over 4, well before that
// interval would have noticed.
func TestMarkerRaisesPartitionCountFirst(t *testing.T) {
	r := newRig(t, 3)
	cfg := r.config()
	cfg.TopicInterval = time.Minute
	started := time.Now()
	r.start(cfg, nil)
	first := time.Now().Add(-2 * time.Second).Truncate(time.Millisecond)
	r.resolved(first)
	testenv.Eventually(t, 30*time.Second, "watermark known over 3 partitions", func() error {
		if wm := r.watermark(); !wm.Known || !wm.W.Equal(first) || wm.Partitions != 3 {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})

	ctx := testenv.Context(t, 30*time.Second)
	if resp, err := r.adm.CreatePartitions(ctx, 1, r.topic); err != nil || resp.Error() != nil {
		t.Fatalf("create partitions: %v %v", err, resp.Error())
	}
	// Markers after the growth go to the old partitions first (say p3 is
	// not yet assigned to anyone): each says 4.
	next := first.Add(time.Second)
	var recs []*kgo.Record
	for p := int32(0); p < 3; p++ {
		recs = append(recs, &kgo.Record{Partition: p, Key: []byte(schema.MarkerKey(p)),
			Value: schema.Encode(&schema.Resolved{ResolvedTime: next, LSN: 2, Partitions: 4})})
	}
	r.produce(r.manual, recs...)
	testenv.Eventually(t, 30*time.Second, "the markers applied", func() error {
		wm := r.watermark()
		for p := int32(0); p < 3; p++ {
			if !wm.PerPartition[p].Equal(next) {
				return fmt.Errorf("p%d = %s, want %s", p, wm.PerPartition[p], next)
			}
		}
		return nil
	})
	wm := r.watermark()
	if wm.Partitions != 4 || wm.Known {
		t.Fatalf("after markers fanned out to 4 partitions were applied to p0..p2, the watermark counts %d partitions and Known=%v (W %s): want 4 and unknown until p3 has one",
			wm.Partitions, wm.Known, wm.W)
	}
	if wm.GrownFrom != 3 || wm.GrownAt.IsZero() {
		t.Fatalf("growth not recorded: from %d at %s", wm.GrownFrom, wm.GrownAt)
	}
	// p3's first marker makes W known over all four.
	testenv.Eventually(t, 30*time.Second, "p3's marker produced (the producer's view has grown)", func() error {
		r.manual.ForceMetadataRefresh()
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return r.manual.ProduceSync(pctx, &kgo.Record{Partition: 3, Key: []byte(schema.MarkerKey(3)),
			Value: schema.Encode(&schema.Resolved{ResolvedTime: next, LSN: 2, Partitions: 4})}).FirstErr()
	})
	// The client's own refresh (its metadata max age, the topic interval)
	// comes a minute after its start at the earliest.
	testenv.Eventually(t, time.Until(started.Add(50*time.Second)), "W known over 4 partitions before the topic interval (the marker's growth refreshed the group's view)", func() error {
		if wm := r.watermark(); !wm.Known || !wm.W.Equal(next) || wm.Partitions != 4 {
			return fmt.Errorf("watermark known=%v W=%s over %d", wm.Known, wm.W, wm.Partitions)
		}
		return nil
	})
}
