package applier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// waveTo produces one change per key at version v and a resolved marker
// after them, and waits until the floors and the watermark have them.
func (r *rig) waveTo(keys int, v int64) map[string]int64 {
	r.t.Helper()
	final := map[string]int64{}
	var recs []*kgo.Record
	for i := 0; i < keys; i++ {
		item := fmt.Sprintf("w-%d", i)
		final[item] = v
		recs = append(recs, changeRecord(change{"t1", item, v}, time.Now()))
	}
	r.produce(r.prod, recs...)
	at := time.Now().Truncate(time.Millisecond)
	r.resolved(at)
	r.exactFloors(20*time.Second, final)
	testenv.Eventually(r.t, 10*time.Second, "watermark at the wave's marker", func() error {
		if wm := r.watermark(); !wm.Known || wm.W.Before(at) || wm.Identity == "" {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})
	return final
}

// fillHot caches a value of "hot" at version v (its floor must be v).
func (r *rig) fillHot(v int64) {
	r.t.Helper()
	ctx := context.Background()
	lr, err := r.cache.Lookup(ctx, "t1", "hot", 0)
	if err != nil || lr.Token.IsZero() {
		r.t.Fatalf("lookup before fill: %+v %v", lr, err)
	}
	if err := r.cache.Fill(ctx, "t1", "hot", lr.Token, v, []byte("cached"), time.Now()); err != nil {
		r.t.Fatal(err)
	}
}

// notServedBelow fails if a lookup of "hot" is a hit older than v.
func (r *rig) notServedBelow(v int64) {
	r.t.Helper()
	lr, err := r.cache.Lookup(context.Background(), "t1", "hot", 0)
	if err != nil {
		r.t.Fatal(err)
	}
	if lr.Status == cache.StatusHit && lr.Entry.Version < v {
		r.t.Fatalf("hot served at version %d although version %d was applied", lr.Entry.Version, v)
	}
}

// Redis restarts while no applier runs and reloads a snapshot older than
// the last applied invalidations (or comes back empty): the next applier
// finds the identity stored beside the watermark differing from the
// server's (or the hash missing while its group has history), sets
// reset_at, rewinds, and restores every floor; the cached value from
// before the lost update is not served.
func TestCacheRestartWhileNoApplierRuns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snapshot bool
	}{{"snapshot reloaded", true}, {"empty", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 2)
			cfg := r.config()
			run := r.start(cfg, nil)
			r.produce(r.prod, changeRecord(change{"t1", "hot", 1}, time.Now()))
			r.waveTo(40, 1)
			r.fillHot(1)
			if tc.snapshot {
				if err := r.rdb.Save(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			r.produce(r.prod, changeRecord(change{"t1", "hot", 2}, time.Now()))
			final := r.waveTo(40, 2)
			final["hot"] = 2
			if err := run.stop(); err != nil {
				t.Fatal(err)
			}

			restarted := time.Now()
			r.redis.Restart(t)
			if f := r.floor("w-0"); tc.snapshot && f != 1 || !tc.snapshot && f != 0 {
				t.Fatalf("after the restart w-0 floor %d: the reload did not lose the last wave", f)
			}
			run = r.start(cfg, nil)
			r.exactFloors(20*time.Second, final)
			if wm := r.watermark(); wm.ResetAt.Before(restarted) {
				t.Fatalf("reset_at %s, want >= %s", wm.ResetAt, restarted)
			}
			r.notServedBelow(2)
			if got := testenv.Metric(t, run.reg, "tidemark_applier_failover_rewinds_total"); got != 1 {
				t.Fatalf("failover rewinds %v, want 1", got)
			}
			if err := run.stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The watermark hash evicted (or deleted) under a running applier: it
// treats that as a failover (reset_at = now, rewind) instead of silently
// writing new watermarks that would extend pre-gap entries again.
func TestWatermarkHashLostWhileRunning(t *testing.T) {
	r := newRig(t, 2)
	run := r.start(r.config(), nil)
	final := r.waveTo(20, 1)
	lost := time.Now()
	if err := r.rdb.Del(context.Background(), "catalog:v1:_tidemark").Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "reset_at set after the hash was lost", func() error {
		if wm := r.watermark(); wm.ResetAt.Before(lost) || wm.Partitions != 2 {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})
	r.exactFloors(10*time.Second, final)
	if got := testenv.Metric(t, run.reg, "tidemark_applier_failover_rewinds_total"); got != 1 {
		t.Fatalf("failover rewinds %v, want 1", got)
	}
}

// The rewind after a failover reaches back the longest lifetime any process
// may give an entry, not this applier's own --cache-hard-lifetime: a serve
// process beside it with the default gives its entries 29.8 s, so an
// invalidation older than the applier's setting can still be what a live
// entry depends on. The wave's records are stamped 10 s old (their commits
// are not, so the rewind's lag term adds nothing); the floors and the
// watermark hash are lost as in a failover to a replica without them, and
// must come back from the rewind.
func TestRewindSpanIsThePromisesNotThisApplierSetting(t *testing.T) {
	r := newRig(t, 2)
	ccfg := cache.DefaultConfig()
	ccfg.HardLifetime, ccfg.SoftMin, ccfg.SoftMax, ccfg.NegativeTTL = 2*time.Second, time.Second, 2*time.Second, time.Second
	short, err := cache.New(ccfg, cache.Deps{Redis: r.rdb, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	run := r.start(r.config(), short)
	final := map[string]int64{}
	var recs []*kgo.Record
	for i := 0; i < 20; i++ {
		item := fmt.Sprintf("w-%d", i)
		final[item] = 1
		rec := changeRecord(change{"t1", item, 1}, time.Now())
		rec.Timestamp = time.Now().Add(-10 * time.Second)
		recs = append(recs, rec)
	}
	r.produce(r.prod, recs...)
	at := time.Now().Truncate(time.Millisecond)
	r.resolved(at)
	r.exactFloors(20*time.Second, final)
	testenv.Eventually(t, 10*time.Second, "watermark at the wave's marker", func() error {
		if wm := r.watermark(); !wm.Known || wm.W.Before(at) || wm.Identity == "" {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})

	ctx := testenv.Context(t, 10*time.Second)
	keys := []string{"catalog:v1:_tidemark"}
	for item := range final {
		keys = append(keys, schema.RedisKey(testNS, "t1", item))
	}
	if err := r.rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	r.exactFloors(20*time.Second, final)
	if got := testenv.Metric(t, run.reg, "tidemark_applier_failover_rewinds_total"); got != 1 {
		t.Fatalf("failover rewinds %v, want 1", got)
	}
}

// The hash lost and recreated in part before the identity check looks (the
// topic's partition count written meanwhile, as syncPartitions does every
// TopicInterval): still a loss, found by the identity the hash no longer
// holds, and the watermark writes refused until reset_at is in place.
func TestWatermarkHashRecreatedBeforeTheCheck(t *testing.T) {
	r := newRig(t, 2)
	run := r.start(r.config(), nil)
	final := r.waveTo(20, 1)
	lost := time.Now()
	ctx := testenv.Context(t, 10*time.Second)
	pipe := r.rdb.TxPipeline() // one transaction: no check sees the hash missing
	pipe.Del(ctx, "catalog:v1:_tidemark")
	pipe.HSet(ctx, "catalog:v1:_tidemark", "partitions", "2")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "reset_at set after the hash was lost and recreated", func() error {
		if wm := r.watermark(); wm.ResetAt.Before(lost) || wm.Partitions != 2 || wm.Identity == "" {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})
	r.exactFloors(10*time.Second, final)
	if got := testenv.Metric(t, run.reg, "tidemark_applier_failover_rewinds_total"); got != 1 {
		t.Fatalf("failover rewinds %v, want 1", got)
	}
}

// An allkeys-* maxmemory-policy may evict the watermark hash: the applier
// refuses to start on it with an error that says what to set, and starts
// when the configuration allows it.
func TestApplierRefusesAllKeysEviction(t *testing.T) {
	r := newRig(t, 1)
	if err := r.rdb.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	a, err := New(r.config(), Deps{Cache: r.cache, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(testenv.Context(t, 30*time.Second))
	if !errors.Is(err, cache.ErrEvictionPolicy) || !strings.Contains(err.Error(), "volatile-lru") || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Fatalf("Run = %v, want an eviction-policy refusal naming volatile-lru", err)
	}
	ccfg := cache.DefaultConfig()
	ccfg.AllowAllKeysEviction = true
	allowed, err := cache.New(ccfg, cache.Deps{Redis: r.rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	run := r.start(r.config(), allowed)
	final := r.produceChanges("e", 10, 10)
	r.waitFloors(20*time.Second, final)
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
}

// A partition whose end offset is below its committed offset lost records
// in the broker: the applier treats it as a gap (reset_at = now, counted,
// logged) and rewinds it to what is left, instead of resetting silently.
func TestCommittedOffsetBeyondEndIsAGap(t *testing.T) {
	r := newRig(t, 1)
	cfg := r.config()
	final := r.produceChanges("g", 20, 20)
	// The group committed 500, as if the broker lost offsets 20..499.
	ctx := testenv.Context(t, 30*time.Second)
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: r.topic, Partition: 0, At: 500, LeaderEpoch: -1})
	resp, err := r.adm.CommitOffsets(ctx, cfg.Group, os)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	run := r.start(cfg, nil)
	r.exactFloors(20*time.Second, final)
	if wm := r.watermark(); wm.ResetAt.Before(started) {
		t.Fatalf("reset_at %s, want >= %s", wm.ResetAt, started)
	}
	if got := testenv.Metric(t, run.reg, "tidemark_applier_gaps_total", "reason", gapOffsetBeyondEnd); got != 1 {
		t.Fatalf("gaps{offset_beyond_end} = %v, want 1", got)
	}
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
}
