package applier

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// stream is a steady update stream: a change every 20 ms over keys items,
// each at a higher version, and a resolved marker every 200 ms.
type stream struct {
	r     *rig
	mu    sync.Mutex
	final map[string]int64
	stopc chan struct{}
	done  chan struct{}
}

func (r *rig) startStream(prefix string, keys int) *stream {
	s := &stream{r: r, final: map[string]int64{}, stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-s.stopc:
				return
			case <-t.C:
			}
			item := fmt.Sprintf("%s-%d", prefix, i%keys)
			s.mu.Lock()
			s.final[item]++
			v := s.final[item]
			s.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := r.prod.ProduceSync(ctx, changeRecord(change{"t1", item, v}, time.Now())).FirstErr()
			if err == nil && i%10 == 9 {
				var recs []*kgo.Record
				for p := int32(0); p < r.partitions; p++ {
					recs = append(recs, &kgo.Record{Partition: p, Key: []byte(schema.MarkerKey(p)),
						Value: schema.Encode(&schema.Resolved{ResolvedTime: time.Now(), LSN: 1})})
				}
				err = r.manual.ProduceSync(ctx, recs...).FirstErr()
			}
			cancel()
			if err != nil {
				r.t.Errorf("stream produce: %v", err)
				return
			}
		}
	}()
	return s
}

// stop ends the stream and returns each key's final version.
func (s *stream) stop() map[string]int64 {
	close(s.stopc)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.final
}

// exactFloors waits until every key's floor equals its final version.
func (r *rig) exactFloors(timeout time.Duration, final map[string]int64) {
	r.t.Helper()
	testenv.Eventually(r.t, timeout, "every key's floor equals its final version", func() error {
		for item, v := range final {
			if f := r.floor(item); f != v {
				return fmt.Errorf("%s floor %d, want %d", item, f, v)
			}
		}
		return nil
	})
}

// stalls reads the stall notes of the group's committed offsets.
func (r *rig) stalls(group string) map[int32]Stall {
	r.t.Helper()
	out := map[int32]Stall{}
	for p, o := range r.fetchOffsets(group) {
		if s, ok := ParseStall(o.Metadata); ok {
			out[p] = s
		}
	}
	return out
}

// dlqCount counts the records in the DLQ topic.
func (r *rig) dlqCount() int64 {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := r.adm.ListEndOffsets(ctx, r.topic+".dlq")
	if err != nil {
		r.t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil {
			n += o.Offset
		}
	})
	return n
}

// Redis refuses writes (NOREPLICAS) for 10 s under a steady update stream,
// while an item with a cached value is updated, a reset marker arrives and
// an undecodable record: nothing produced after the refusal began is
// committed, the watermark does not move, the partitions publish their
// stall with the Redis error, and once writes work again every key's floor
// equals its final version, the cached value is no longer served, reset_at
// holds the marker, and the DLQ holds only the undecodable record.
func TestRedisRefusingWritesLosesNothing(t *testing.T) {
	r := newRig(t, 2)
	cfg := r.config()
	run := r.start(cfg, nil)
	ctx := context.Background()

	// A cached value of "hot" at version 1.
	r.produce(r.prod, changeRecord(change{"t1", "hot", 1}, time.Now()))
	r.waitFloors(20*time.Second, map[string]int64{"hot": 1})
	lr, err := r.cache.Lookup(ctx, "t1", "hot", 0)
	if err != nil || lr.Token.IsZero() {
		t.Fatalf("lookup before fill: %+v %v", lr, err)
	}
	if err := r.cache.Fill(ctx, "t1", "hot", lr.Token, 1, []byte("old"), time.Now()); err != nil {
		t.Fatal(err)
	}

	s := r.startStream("s", 20)
	testenv.Eventually(t, 20*time.Second, "watermark known", func() error {
		if wm := r.watermark(); !wm.Known {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})

	f := refusals[0] // NOREPLICAS
	f.begin(t, r.rdb)
	ends := r.endOffsets()
	w0 := r.watermark().W
	resetAt := time.Now().Truncate(time.Millisecond)
	r.produce(r.prod, changeRecord(change{"t1", "hot", 2}, time.Now()),
		&kgo.Record{Key: []byte(schema.Key("t1", "garbage")), Value: []byte("{not json")})
	var resets []*kgo.Record
	for p := int32(0); p < r.partitions; p++ {
		resets = append(resets, &kgo.Record{Partition: p, Key: []byte(schema.MarkerKey(p)),
			Value: schema.Encode(&schema.Reset{ResetTime: resetAt, Reason: "test"})})
	}
	r.produce(r.manual, resets...)

	stalled := map[int32]bool{}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		for p, c := range r.committed(cfg.Group) {
			if c > ends[p] {
				t.Fatalf("partition %d committed %d past the first refused record (end %d when writes were refused)", p, c, ends[p])
			}
		}
		if w := r.watermark().W; !w.Equal(w0) {
			t.Fatalf("watermark moved from %s to %s while Redis refused writes", w0, w)
		}
		for p, st := range r.stalls(cfg.Group) {
			if !strings.Contains(st.Error, "NOREPLICAS") {
				t.Fatalf("partition %d stall note %+v does not carry the Redis error", p, st)
			}
			stalled[p] = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(stalled) != int(r.partitions) {
		t.Fatalf("stall notes for partitions %v, want all %d", stalled, r.partitions)
	}
	if got := testenv.Metric(t, run.reg, "tidemark_applier_partition_stalled_seconds", "partition", "0"); got < 5 {
		t.Fatalf("partition 0 stalled for %vs by the metric, want >= 5", got)
	}
	f.end(t, r.rdb)

	time.Sleep(time.Second) // the stream goes on a little after the fault
	final := s.stop()
	final["hot"] = 2
	r.resolved(time.Now())
	r.exactFloors(30*time.Second, final)
	testenv.Eventually(t, 10*time.Second, "stall notes cleared", func() error {
		if st := r.stalls(cfg.Group); len(st) > 0 {
			return fmt.Errorf("stall notes %+v", st)
		}
		return nil
	})
	if wm := r.watermark(); wm.ResetAt.Before(resetAt) {
		t.Fatalf("reset_at %s, want >= %s", wm.ResetAt, resetAt)
	}
	lr, err = r.cache.Lookup(ctx, "t1", "hot", 0)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Status == cache.StatusHit && lr.Entry.Version < 2 {
		t.Fatalf("hot served at version %d after its update to 2 was applied", lr.Entry.Version)
	}
	testenv.Eventually(t, 10*time.Second, "the undecodable record dead-lettered", func() error {
		if n := r.dlqCount(); n != 1 {
			return fmt.Errorf("%d dead letters", n)
		}
		return nil
	})
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	if c := run.a.Counts(); c.DLQ != 1 {
		t.Fatalf("counts %+v, want exactly 1 dlq", c)
	}
}
