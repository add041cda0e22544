package applier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// fakeCache records the calls the processor makes, in order.
type fakeCache struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeCache) log(s string)                                        { f.mu.Lock(); f.calls = append(f.calls, s); f.mu.Unlock() }
func (f *fakeCache) Namespace() string                                   { return "catalog" }
func (f *fakeCache) ClaimIdentity(context.Context, cache.Identity) error { return nil }

func (f *fakeCache) InvalidateBatch(_ context.Context, b []cache.Invalidation) ([]cache.InvalidateOutcome, error) {
	var parts []string
	out := make([]cache.InvalidateOutcome, len(b))
	for i, inv := range b {
		parts = append(parts, fmt.Sprintf("%s=%d", inv.Item, inv.Version))
		out[i].Result = cache.InvalidateApplied
	}
	f.log("inv " + strings.Join(parts, ","))
	return out, nil
}
func (f *fakeCache) Purge(_ context.Context, _, item string) error {
	f.log("purge " + item)
	return nil
}
func (f *fakeCache) CheckEvictionPolicy(context.Context) error { return nil }
func (f *fakeCache) SetWatermarkFrom(_ context.Context, p int32, ts time.Time, _, _ string) error {
	f.log(fmt.Sprintf("wm p%d %d", p, ts.Unix()))
	return nil
}
func (f *fakeCache) BindWatermarkIdentity(_ context.Context, server string) (string, error) {
	return server + "#0", nil
}
func (f *fakeCache) SetPartitions(context.Context, int) error { return nil }
func (f *fakeCache) MarkGap(_ context.Context, ts time.Time) (time.Time, error) {
	f.log(fmt.Sprintf("reset %d", ts.Unix()))
	return ts, nil
}
func (f *fakeCache) MarkGapNow(context.Context) (time.Time, error) {
	f.log("reset now")
	return time.Now(), nil
}
func (f *fakeCache) ReadWatermark(context.Context) (cache.Watermark, error) {
	return cache.Watermark{}, nil
}
func (f *fakeCache) ServerIdentity(context.Context) (string, error) { return "x", nil }
func (f *fakeCache) Config() cache.Config                           { return cache.DefaultConfig() }

func rec(off int64, key string, ev schema.Event) *kgo.Record {
	return &kgo.Record{Offset: off, Key: []byte(key), Value: schema.Encode(ev)}
}

// Batches dedupe by key keeping the highest version, and every record that
// acts beyond one key (resolved, truncate, hard delete, reset) runs only
// after the batch before it; progress is reported in order.
func TestProcessOrdersAndDedupes(t *testing.T) {
	fc := &fakeCache{}
	met, _ := newMetrics(prometheus.NewRegistry())
	p := processor{cache: fc, met: met, counts: &counters{}, log: testenv.Logger(t), maxBatch: 2,
		bo: backoff{time.Millisecond, time.Millisecond}, watermarks: true}
	ch := func(item string, v int64, op schema.Op) *schema.Change {
		return &schema.Change{Tenant: "t", Item: item, Version: v, Op: op, LSN: 1, CommitTime: time.Unix(100, 0), Xid: 1}
	}
	recs := []*kgo.Record{
		rec(0, "t/a", ch("a", 1, schema.OpUpsert)),
		rec(1, "t/a", ch("a", 3, schema.OpUpsert)),
		rec(2, "t/a", ch("a", 2, schema.OpDelete)), // tombstone: an invalidation
		rec(3, schema.MarkerKey(0), &schema.Resolved{ResolvedTime: time.Unix(200, 0), LSN: 1}),
		rec(4, "t/b", ch("b", 5, schema.OpUpsert)),
		rec(5, "t/c", ch("c", 1, schema.OpUpsert)),
		rec(6, "t/d", ch("d", 1, schema.OpUpsert)), // third key: the batch of 2 flushed first
		rec(7, "t/e", ch("e", 0, schema.OpDelete)), // hard delete: purge
		rec(8, schema.MarkerKey(0), ch("", 0, schema.OpTruncate)),
		rec(9, schema.MarkerKey(0), &schema.Reset{ResetTime: time.Unix(300, 0), Reason: "gap"}),
		rec(10, "t/f", ch("f", 9, schema.OpUpsert)),
	}
	var progress []int64
	err := p.process(context.Background(), 0, recs, func(r *kgo.Record, _ time.Time, _ bool) { progress = append(progress, r.Offset) })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"inv a=3", "wm p0 200", "inv b=5,c=1", "inv d=1", "purge e", "reset 100", "reset 300", "inv f=9"}
	if strings.Join(fc.calls, "|") != strings.Join(want, "|") {
		t.Fatalf("calls\n got %v\nwant %v", fc.calls, want)
	}
	if fmt.Sprint(progress) != "[2 3 5 6 7 8 9 10]" {
		t.Fatalf("progress %v", progress)
	}
	if c := p.counts.snapshot(); c.Applied != 7 || c.Older != 2 || c.Total() != 9 {
		t.Fatalf("counts %+v", c)
	}
}

// A failing cache is retried until it recovers; cancellation stops the
// retry and reports no progress for the unapplied records.
func TestProcessRetriesAndStops(t *testing.T) {
	fc := &flakyCache{Cache: &fakeCache{}}
	fc.blocked.Store(true)
	met, _ := newMetrics(prometheus.NewRegistry())
	p := processor{cache: fc, met: met, counts: &counters{}, log: testenv.Logger(t), maxBatch: 10,
		bo: backoff{time.Millisecond, 5 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	var progressed bool
	go func() {
		for fc.calls.Load() < 5 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	err := p.process(ctx, 0, []*kgo.Record{rec(0, "t/a", &schema.Change{Tenant: "t", Item: "a", Version: 1, Op: schema.OpUpsert, CommitTime: time.Now()})},
		func(*kgo.Record, time.Time, bool) { progressed = true })
	if !errors.Is(err, context.Canceled) || progressed {
		t.Fatalf("err %v progressed %v", err, progressed)
	}
}

func TestBackoffIsCappedWithJitter(t *testing.T) {
	b := backoff{10 * time.Millisecond, 80 * time.Millisecond}
	for attempt := 0; attempt < 20; attempt++ {
		d := b.delay(attempt)
		hi := min(10*time.Millisecond<<attempt, 80*time.Millisecond)
		if attempt > 10 {
			hi = 80 * time.Millisecond
		}
		if d < hi/2 || d > hi {
			t.Fatalf("attempt %d: delay %s outside [%s, %s]", attempt, d, hi/2, hi)
		}
	}
}

func TestConfigValidateNamesEveryFlag(t *testing.T) {
	c := DefaultConfig()
	c.Topic, c.SessionTimeout, c.MaxBatch = "", 0, 0 // an empty Group is the namespace's default (GroupFor)
	err := c.Validate()
	for _, flag := range []string{"Brokers:", "Topic:", "SessionTimeout:", "MaxBatch:"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Fatalf("Validate() = %v, want it to name %s", err, flag)
		}
	}
	d := DefaultConfig()
	d.Brokers = []string{"x:1"}
	if err := d.Validate(); err != nil {
		t.Fatalf("default config with brokers: %v", err)
	}
}

// The identity check's interval is bounded: a Cluster master failing over
// beside the watermark's is found only by it, and until then the watermark
// extends entries past the floors that master lost.
func TestConfigBoundsTheIdentityInterval(t *testing.T) {
	c := DefaultConfig()
	c.Brokers = []string{"x:1"}
	for _, tc := range []struct {
		every time.Duration
		ok    bool
	}{{MaxIdentityInterval, true}, {100 * time.Millisecond, true}, {MaxIdentityInterval + time.Millisecond, false}, {time.Minute, false}, {0, false}} {
		c.IdentityInterval = tc.every
		if err := c.Validate(); (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "IdentityInterval:")) {
			t.Errorf("identity interval %s: %v, want accepted %v", tc.every, err, tc.ok)
		}
	}
}
