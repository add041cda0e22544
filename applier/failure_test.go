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

// Garbage values and an unknown schema version go to the DLQ with their
// origin in headers, and their keys are purged; a WRONGTYPE key is no reason
// to dead-letter (Redis can take the record once the key is gone): it is
// purged and invalidated. The records after them are applied.
func TestBadRecordsGoToDLQ(t *testing.T) {
	r := newRig(t, 1)
	ctx := context.Background()
	wrong := schema.RedisKey(testNS, "t1", "wrongtype")
	if err := r.rdb.Set(ctx, wrong, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.rdb.HSet(ctx, schema.RedisKey(testNS, "t1", "garbage"), "v", "3", "p", "old").Err(); err != nil {
		t.Fatal(err)
	}
	r.produce(r.prod,
		&kgo.Record{Key: []byte(schema.Key("t1", "garbage")), Value: []byte("{not json"), Headers: []kgo.RecordHeader{{Key: "origin", Value: []byte("x")}}},
		&kgo.Record{Key: []byte(schema.Key("t1", "future")), Value: []byte(`{"schema":2,"type":"change"}`)},
		changeRecord(change{"t1", "wrongtype", 5}, time.Now()),
	)
	final := r.produceChanges("after", 50, 10)
	run := r.start(r.config(), nil)
	r.waitFloors(20*time.Second, final)

	cl, err := kgo.NewClient(kgo.SeedBrokers(r.kafka.Brokers...), kgo.ConsumeTopics(r.topic+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var dead []*kgo.Record
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for len(dead) < 2 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(rec *kgo.Record) { dead = append(dead, rec) })
	}
	if len(dead) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dead))
	}
	wantKeys := []string{schema.Key("t1", "garbage"), schema.Key("t1", "future")}
	for i, rec := range dead {
		h := map[string]string{}
		for _, kv := range rec.Headers {
			h[kv.Key] = string(kv.Value)
		}
		if string(rec.Key) != wantKeys[i] || h[HeaderSourcePartition] != "0" || h[HeaderSourceOffset] != fmt.Sprint(i) || h[HeaderError] == "" {
			t.Fatalf("dead letter %d: key %q headers %v", i, rec.Key, h)
		}
		if i == 0 && (h["origin"] != "x" || string(rec.Value) != "{not json") {
			t.Fatalf("dead letter lost the original value or headers: %q %v", rec.Value, h)
		}
	}
	// Purged: the unreadable record's cached value.
	if n, _ := r.rdb.Exists(ctx, schema.RedisKey(testNS, "t1", "garbage")).Result(); n != 0 {
		t.Fatal("garbage not purged")
	}
	// The wrong-typed key was replaced by the invalidation's floor.
	if f := r.floor("wrongtype"); f != 5 {
		t.Fatalf("wrongtype floor %d, want 5", f)
	}
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	if c := run.a.Counts(); c.DLQ != 2 {
		t.Fatalf("counts %+v, want 2 dlq", c)
	}
	if got := testenv.Metric(t, run.reg, "tidemark_applier_records_total", "result", "dlq"); got != 2 {
		t.Fatalf("dlq metric %v", got)
	}
}

// Redis down for 5 s mid-stream: no offset is committed past an unapplied
// record while it is down, and afterwards every key reaches its final floor
// (the restart also flushed Redis: the failover rewind restores the rest).
func TestRedisDownMidStream(t *testing.T) {
	r := newRig(t, 2)
	cfg := r.config()
	run := r.start(cfg, nil)
	final := r.produceChanges("k", 400, 40)
	r.waitFloors(20*time.Second, final)
	before := r.endOffsets()
	testenv.Eventually(t, 10*time.Second, "first records committed", func() error {
		c := r.committed(cfg.Group)
		for p, e := range before {
			if c[p] != e {
				return fmt.Errorf("partition %d committed %d, end %d", p, c[p], e)
			}
		}
		return nil
	})
	r.redis.Stop()
	// A second wave of the same keys at higher versions, produced while
	// Redis is down.
	wave := map[string]int64{}
	var recs []*kgo.Record
	for i := 0; i < 400; i++ {
		item := fmt.Sprintf("k-%d", i%40)
		wave[item]++
		recs = append(recs, changeRecord(change{"t1", item, 100 + wave[item]}, time.Now()))
	}
	r.produce(r.prod, recs...)
	for k, v := range wave {
		final[k] = 100 + v
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		c := r.committed(cfg.Group)
		for p, e := range before {
			if c[p] > e {
				t.Fatalf("partition %d committed %d past the last applied offset %d while Redis was down", p, c[p], e)
			}
		}
	}
	if err := r.redis.Start(); err != nil {
		t.Fatal(err)
	}
	r.waitFloors(30*time.Second, final)
	testenv.Eventually(t, 10*time.Second, "everything committed", func() error {
		c, ends := r.committed(cfg.Group), r.endOffsets()
		for p, e := range ends {
			if c[p] != e {
				return fmt.Errorf("partition %d committed %d, end %d", p, c[p], e)
			}
		}
		return nil
	})
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
}

// A cache-tier restart (empty data, new run_id) sets reset_at, restores the
// partition count, rewinds the partitions and so restores every floor
// without anything new being produced.
func TestFailoverRewindRestoresFloors(t *testing.T) {
	r := newRig(t, 3)
	run := r.start(r.config(), nil)
	final := r.produceChanges("f", 600, 60)
	r.waitFloors(20*time.Second, final)
	restarted := time.Now()
	r.redis.Restart(t)
	r.waitFloors(20*time.Second, final)
	testenv.Eventually(t, 10*time.Second, "reset_at and partitions restored", func() error {
		wm := r.watermark()
		if wm.ResetAt.Before(restarted.Add(-time.Millisecond)) || wm.Partitions != 3 {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})
	if got := testenv.Metric(t, run.reg, "tidemark_applier_failover_rewinds_total"); got != 1 {
		t.Fatalf("failover rewinds %v, want 1", got)
	}
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
}
