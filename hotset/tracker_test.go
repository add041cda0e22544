package hotset_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/lab/testenv"
)

func newTracker(t *testing.T, cfg hotset.Config, r *testenv.Redis) *hotset.Tracker {
	t.Helper()
	tr, err := hotset.New(cfg, hotset.Deps{Redis: r.Client(t), Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// Two serve processes count different reads; the shared set ranks the keys by
// their combined rate, stays within MaxKeys, answers per tenant, and its rate
// estimate is near the true rate.
func TestMergeRanksAcrossProcesses(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	cfg := hotset.DefaultConfig()
	cfg.MaxKeys, cfg.TimeConstant = 50, time.Minute
	a, b := newTracker(t, cfg, r), newTracker(t, cfg, r)
	for i := range 200 {
		item := "i" + strconv.Itoa(i)
		// Process a sees i0..i199 once each beyond the hot ones; b sees the
		// hot ones of tenant t2. Combined: t2/h0 > t1/h0 > t1/h1 > rest.
		a.Observe("t1", item)
	}
	for range 600 {
		a.Observe("t1", "h0")
		b.Observe("t2", "h0")
		b.Observe("t2", "h0")
	}
	for range 300 {
		b.Observe("t1", "h1")
	}
	if err := a.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	top, err := hotset.ReadTop(ctx, r.Client(t), cfg.Namespace, 3, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"t2/h0", "t1/h0", "t1/h1"}
	if len(top) != 3 {
		t.Fatalf("top 3 = %+v", top)
	}
	for i, h := range top {
		if h.Tenant+"/"+h.Item != want[i] {
			t.Errorf("rank %d = %+v, want %s", i, h, want[i])
		}
	}
	// 1200 reads just now with tau = 60 s is a decayed rate of 20/s.
	if top[0].Rate < 19 || top[0].Rate > 21 {
		t.Errorf("t2/h0 rate %.2f/s, want about 20", top[0].Rate)
	}
	if n := r.Client(t).ZCard(ctx, hotset.Key(cfg.Namespace)).Val(); n != 50 {
		t.Errorf("shared set holds %d keys, want MaxKeys 50", n)
	}
	t1, err := hotset.ReadTop(ctx, r.Client(t), cfg.Namespace, 10, "t1")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range t1 {
		if h.Tenant != "t1" {
			t.Errorf("tenant filter t1 returned %+v", h)
		}
	}
	if len(t1) != 10 || t1[0].Item != "h0" {
		t.Errorf("t1 top = %+v", t1)
	}
}

// With a short time constant, a key that was hot earlier falls below one hot
// now, even with fewer reads in total, and the landmark rescale keeps the
// scores finite.
func TestMergeDecays(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	cfg := hotset.DefaultConfig()
	cfg.TimeConstant = time.Second
	tr := newTracker(t, cfg, r)
	for range 1000 {
		tr.Observe("t", "old")
	}
	if err := tr.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the decay is the point: e^-3 of 1000 is 50
	for range 200 {
		tr.Observe("t", "new")
	}
	if err := tr.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	top, err := hotset.ReadTop(ctx, r.Client(t), cfg.Namespace, 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0].Item != "new" || top[1].Item != "old" {
		t.Fatalf("after 3 time constants top = %+v, want new then old", top)
	}
	// Well past the rescale point (20 time constants) the scores stay usable.
	time.Sleep(21 * time.Second)
	tr.Observe("t", "newest")
	if err := tr.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	top, err = hotset.ReadTop(ctx, r.Client(t), cfg.Namespace, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 1 || top[0].Item != "newest" || top[0].Rate <= 0 {
		t.Fatalf("after rescale top = %+v", top)
	}
}

// Concurrent observers and merges are race-free, and memory stays bounded
// by tenants x counters whatever the number of distinct keys and tenants.
func TestTrackerBounded(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx, cancel := context.WithCancel(testenv.Context(t, 30*time.Second))
	cfg := hotset.DefaultConfig()
	cfg.PerTenant, cfg.MaxTenants, cfg.MergeInterval = 16, 4, 20*time.Millisecond
	tr := newTracker(t, cfg, r)
	done := make(chan error)
	go func() { done <- tr.Run(ctx) }()
	for g := range 4 {
		go func() {
			for i := 0; ctx.Err() == nil; i++ {
				tr.Observe(fmt.Sprintf("t%d", rand.IntN(20)), fmt.Sprintf("%d-%d", g, i))
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(tr.Top("", 1000)); n > 16*4 {
		t.Errorf("tracker holds %d keys, bound is 64", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// When the shared set is lost with its cache node, the next merge re-seeds
// it from the whole sketch, so the warmer finds the hot keys at once.
func TestMergeReseedsLostSet(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	tr := newTracker(t, hotset.DefaultConfig(), r)
	for range 100 {
		tr.Observe("t", "hot")
	}
	tr.Observe("t", "cold")
	if err := tr.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	r.Restart(t)
	tr.Observe("t", "cold") // the only read of the interval
	if err := tr.Merge(ctx); err != nil {
		t.Fatal(err)
	}
	top, err := hotset.ReadTop(ctx, r.Client(t), "catalog", 2, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 2 || top[0].Item != "hot" {
		t.Fatalf("after the set was lost, top = %+v, want hot first", top)
	}
}

// The fast hot set sums the rates every process publishes, replaces a
// process's entries with its next publish, and drops a process that stopped
// publishing once its entries expire (three intervals).
func TestFastSetSumsProcessesAndForgetsStopped(t *testing.T) {
	r := testenv.StartRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	cfg := hotset.DefaultConfig()
	cfg.FastInterval, cfg.FastTimeConstant = 100*time.Millisecond, 200*time.Millisecond
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	newT := func() *hotset.Tracker {
		tr, err := hotset.New(cfg, hotset.Deps{Redis: r.Client(t), Log: testenv.Logger(t), Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	a, b := newT(), newT()
	for range 100 {
		a.Observe("t1", "hot")
		b.Observe("t1", "hot")
	}
	a.Observe("t1", "cold")
	now = now.Add(cfg.FastInterval)
	for _, tr := range []*hotset.Tracker{a, b} {
		if err := tr.PublishFast(ctx); err != nil {
			t.Fatal(err)
		}
	}
	top, err := hotset.ReadFast(ctx, r.Client(t), cfg.Namespace, 10)
	if err != nil {
		t.Fatal(err)
	}
	// Each process: 100 reads in 0.1 s is 1000/s, times (1-exp(-0.5)) = 393/s.
	if len(top) != 2 || top[0].Item != "hot" || math.Abs(top[0].Rate-2*393.5) > 2 || top[1].Item != "cold" {
		t.Fatalf("fast set %+v, want hot at about 787/s (two processes summed), then cold", top)
	}
	// a publishes again with nothing read: its old entries are replaced by
	// decayed ones, not added to.
	now = now.Add(cfg.FastInterval)
	if err := a.PublishFast(ctx); err != nil {
		t.Fatal(err)
	}
	top, err = hotset.ReadFast(ctx, r.Client(t), cfg.Namespace, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := 393.5 + 393.5*math.Exp(-0.5); len(top) != 1 || math.Abs(top[0].Rate-want) > 2 {
		t.Fatalf("after a's second publish: %+v, want hot at %.0f/s (a decayed, b as published)", top, want)
	}
	// Neither publishes any more: after 3 intervals (Redis's clock) the set is empty.
	deadline := time.Now().Add(10 * time.Second)
	for {
		top, err = hotset.ReadFast(ctx, r.Client(t), cfg.Namespace, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(top) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fast set still %+v 10 s after the last publish, want empty after 3 intervals (%s)", top, 3*cfg.FastInterval)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := r.Client(t).HLen(ctx, hotset.FastKey(cfg.Namespace)).Val(); n != 0 {
		t.Errorf("expired entries kept: %d fields in %s", n, hotset.FastKey(cfg.Namespace))
	}
}
