package applier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// Every change ends with floor >= version, the watermark follows the
// resolved markers, partitions equals the topic's count, and a clean
// shutdown commits exactly what was applied (the end of every partition).
func TestAppliesEveryChangeThenWatermark(t *testing.T) {
	r := newRig(t, 4)
	run := r.start(r.config(), nil)
	final := r.produceChanges("a", 3000, 300)
	resolvedAt := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	r.resolved(resolvedAt)
	r.waitFloors(30*time.Second, final)
	testenv.Eventually(t, 10*time.Second, "watermark known at the resolved time", func() error {
		wm := r.watermark()
		if !wm.Known || !wm.W.Equal(resolvedAt) || wm.Partitions != 4 {
			return fmt.Errorf("watermark %+v, want W=%s over 4 partitions", wm, resolvedAt)
		}
		return nil
	})
	if err := run.a.Ready(context.Background()); err != nil {
		t.Fatalf("not ready with a known watermark: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, "gauges refreshed", func() error {
		if age := testenv.Metric(t, run.reg, "tidemark_watermark_age_seconds"); age <= 0 || age > 30 {
			return fmt.Errorf("tidemark_watermark_age_seconds %v", age)
		}
		if age := testenv.Metric(t, run.reg, "tidemark_applier_partition_watermark_age_seconds", "partition", "3"); age <= 0 || age > 30 {
			return fmt.Errorf("partition 3 watermark age %v", age)
		}
		return nil
	})
	for _, name := range []string{"tidemark_applier_commit_to_apply_seconds", "tidemark_applier_batch_records"} {
		if n := testenv.Metric(t, run.reg, name); n == 0 {
			t.Fatalf("%s has no samples", name)
		}
	}
	if lag := testenv.Metric(t, run.reg, "tidemark_applier_consumer_lag_records", "partition", "0"); lag != 0 {
		t.Fatalf("consumer lag %v after everything was applied", lag)
	}
	if err := run.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Each record at least once: a group member that misses its session
	// (a starved box, a real broker) rejoins and is handed its partitions
	// from the last commit, so some records are counted again, as
	// duplicates or older; the floors above are the result that matters.
	c := run.a.Counts()
	if c.Total() < 3000 || c.DLQ != 0 {
		t.Fatalf("counts %+v, want at least 3000 records and no dlq", c)
	}
	if got := testenv.Metric(t, run.reg, "tidemark_applier_records_total"); got == 0 {
		t.Fatal("tidemark_applier_records_total not counted")
	}
	ends, committed := r.endOffsets(), r.committed(r.config().Group)
	for p, end := range ends {
		if committed[p] != end {
			t.Fatalf("partition %d committed %d after shutdown, want end %d (all: %v vs %v)", p, committed[p], end, committed, ends)
		}
	}
}

// flakyCache fails InvalidateBatch like an unreachable Redis while blocked.
type flakyCache struct {
	Cache
	blocked atomic.Bool
	calls   atomic.Int64
}

var errConnRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

func (f *flakyCache) InvalidateBatch(ctx context.Context, b []cache.Invalidation) ([]cache.InvalidateOutcome, error) {
	f.calls.Add(1)
	if f.blocked.Load() {
		return nil, errConnRefused
	}
	return f.Cache.InvalidateBatch(ctx, b)
}

// A resolved marker advances W only after every earlier record of its
// partition is in Redis: with invalidations failing, W stays put; once they
// succeed, the floor lands, then W.
func TestWatermarkWaitsForEarlierRecords(t *testing.T) {
	r := newRig(t, 1)
	fc := &flakyCache{Cache: r.cache}
	run := r.start(r.config(), fc)
	first := time.Now().Add(-2 * time.Second).Truncate(time.Millisecond)
	r.resolved(first)
	testenv.Eventually(t, 15*time.Second, "first watermark", func() error {
		if wm := r.watermark(); !wm.W.Equal(first) {
			return fmt.Errorf("W %s, want %s", wm.W, first)
		}
		return nil
	})
	fc.blocked.Store(true)
	r.produce(r.prod, changeRecord(change{"t1", "slow", 7}, time.Now()))
	second := time.Now().Truncate(time.Millisecond)
	r.resolved(second)
	testenv.Eventually(t, 10*time.Second, "invalidation attempted", func() error {
		if fc.calls.Load() < 3 {
			return errors.New("fewer than 3 attempts")
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	if wm := r.watermark(); !wm.W.Equal(first) {
		t.Fatalf("W moved to %s while the earlier record was not applied", wm.W)
	}
	if f := r.floor("slow"); f != 0 {
		t.Fatalf("floor %d while blocked", f)
	}
	fc.blocked.Store(false)
	testenv.Eventually(t, 10*time.Second, "floor then W", func() error {
		if f := r.floor("slow"); f != 7 {
			return fmt.Errorf("floor %d", f)
		}
		if wm := r.watermark(); !wm.W.Equal(second) {
			return fmt.Errorf("W %s, want %s", wm.W, second)
		}
		return nil
	})
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
}

// On a Redis Cluster the batches span slots on every master: every floor
// lands and the watermark is written.
func TestAppliesOnRedisCluster(t *testing.T) {
	r := newRig(t, 3)
	rc := testenv.StartRedisCluster(t, 3)
	rdb, err := cache.ParseRedisURL(rc.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Close() })
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	run := r.start(r.config(), cc)
	final := r.produceChanges("cl", 900, 300)
	at := time.Now().Truncate(time.Millisecond)
	r.resolved(at)
	testenv.Eventually(t, 30*time.Second, "floors and watermark on the cluster", func() error {
		for item, v := range final {
			f, err := rdb.HGet(context.Background(), schema.RedisKey(testNS, "t1", item), schema.FieldFloor).Int64()
			if err != nil || f < v {
				return fmt.Errorf("%s floor %d (%v), want %d", item, f, err, v)
			}
		}
		wm, err := cc.ReadWatermark(context.Background())
		if err != nil || !wm.W.Equal(at) {
			return fmt.Errorf("watermark %+v %v", wm, err)
		}
		return nil
	})
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
}

// Before capture has created the topic, an applier is not ready and says
// which topic it waits for; it becomes ready once the topic exists.
func TestNotReadyUntilTheTopicExists(t *testing.T) {
	r := newRig(t, 2)
	ctx := testenv.Context(t, time.Minute)
	if _, err := r.adm.DeleteTopics(ctx, r.topic); err != nil {
		t.Fatal(err)
	}
	cfg := r.config()
	run := r.start(cfg, nil)
	testenv.Eventually(t, 30*time.Second, "not ready, naming the missing topic", func() error {
		err := run.a.Ready(context.Background())
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("topic %q does not exist yet", cfg.Topic)) {
			return fmt.Errorf("Ready = %v", err)
		}
		return nil
	})
	t.Logf("no topic: Ready = %v", run.a.Ready(context.Background()))
	r.kafka.CreateTopic(t, cfg.Topic, 2, nil)
	testenv.Eventually(t, 30*time.Second, "ready once the topic exists", func() error { return run.a.Ready(context.Background()) })
}
