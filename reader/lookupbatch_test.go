package reader

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// roundTrips is the real cache client with its lookups counted by round
// trip (Lookup is one, LookupMany one for all its items); a Lookup of the
// item named hang, while hanging is set, waits for its deadline first, as
// a Redis node that stopped answering would make it; a Lookup of the item
// named hold waits for release to close (set both before the reads).
type roundTrips struct {
	Cache
	single, many, items atomic.Int64
	hang                string
	hanging             atomic.Bool
	hangEnded           atomic.Bool // a hung Lookup has returned
	hold                string
	release             chan struct{}
}

func (c *roundTrips) Lookup(ctx context.Context, tenant, item string, minVersion int64) (cache.LookupResult, error) {
	c.single.Add(1)
	if c.release != nil && item == c.hold {
		select {
		case <-c.release:
		case <-ctx.Done():
			return cache.LookupResult{}, ctx.Err()
		}
	}
	if item == c.hang && c.hanging.Load() {
		<-ctx.Done()
		c.hangEnded.Store(true)
		return cache.LookupResult{}, ctx.Err()
	}
	return c.Cache.Lookup(ctx, tenant, item, minVersion)
}

func (c *roundTrips) LookupMany(ctx context.Context, tenant string, items []string) ([]cache.LookupResult, []error, error) {
	c.many.Add(1)
	c.items.Add(int64(len(items)))
	return c.Cache.LookupMany(ctx, tenant, items)
}

// newCountedReader is a Reader (L1 off: every read looks up) over the real
// cache tier on rdb, its lookups counted.
func newCountedReader(t *testing.T, rdb *redis.Client, src Source, rcfg func(*Config)) (*Reader, *roundTrips) {
	t.Helper()
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	rt := &roundTrips{Cache: cc}
	cfg := DefaultConfig()
	cfg.SourcePool, cfg.Mapping, cfg.L1Size = "test", "test.items#0", 0
	cfg.RequestTimeout, cfg.SourceTimeout, cfg.LookupTimeout = 10*time.Second, 5*time.Second, 5*time.Second
	if rcfg != nil {
		rcfg(&cfg)
	}
	rd, err := New(cfg, Deps{Source: src, Cache: rt, Redis: rdb, Clock: trustedClock{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Close)
	return rd, rt
}

// Lookups of reads that coincide share pipelined round trips (one per
// tenant in them), and each answer is still its own key's. The test holds
// the first round trip until the other 63 reads of 64 cached keys of two
// tenants have queued behind it, so what coincides does not depend on the
// box's scheduling: 64 lookups take exactly three round trips (the held
// one, then one per tenant for the 63). Then 64 readers of the same keys,
// 20 reads each and unheld, must each still get their own key's answer.
// With batching broken (every lookup alone) it printed: "63 lookups
// queued behind the held one: not true after 20s: 0 queued".
func TestCoincidingLookupsShareARoundTrip(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	const keys, rounds = 64, 20
	tenants := []string{"acme", "globex"}
	version := func(tenant string, i int) int64 { // each tenant's own versions: a mixed-up answer shows
		if tenant == "globex" {
			return int64(i + 1001)
		}
		return int64(i + 1)
	}
	for _, tenant := range tenants {
		for i := range keys {
			src.set(tenant, fmt.Sprintf("k%d", i), version(tenant, i), fmt.Sprintf(`{"n":%d}`, i))
		}
	}
	rd, rt := newCountedReader(t, rdb, src, func(c *Config) { c.FillRate = 0 })
	for _, tenant := range tenants {
		for i := range keys { // cached: the reads below are hits, one lookup each
			if r := getAdmitted(t, rd, Query{Tenant: tenant, Item: fmt.Sprintf("k%d", i)}); r.Kind != Found {
				t.Fatalf("priming %s/k%d: %d %q", tenant, i, r.Kind, r.CacheStatus)
			}
		}
	}
	reads0 := src.reads.Load()
	check := func(r Result, tenant string, i int) error {
		if want := version(tenant, i); r.Kind != Found || r.Version != want || r.CacheStatus != "tidemark; hit" {
			return fmt.Errorf("Get %s/k%d: kind %d version %d %q, want Found v%d \"tidemark; hit\"", tenant, i, r.Kind, r.Version, r.CacheStatus, want)
		}
		return nil
	}

	// Held: reader i reads k<i> of tenant i%2; reader 0's lookup (acme/k0)
	// is the round trip in flight while the others queue.
	rd.lookups.queueWait = time.Minute // the held round trip outlasts the usual bound on purpose
	rt.hold, rt.release = "k0", make(chan struct{})
	single0, many0, items0 := rt.single.Load(), rt.many.Load(), rt.items.Load()
	errs := make(chan error, keys)
	var wg sync.WaitGroup
	read := func(i int) {
		tenant := tenants[i%2]
		if err := check(rd.Get(context.Background(), Query{Tenant: tenant, Item: fmt.Sprintf("k%d", i)}), tenant, i); err != nil {
			errs <- err
		}
	}
	wg.Go(func() { read(0) })
	testenv.Eventually(t, 10*time.Second, "the held lookup is in flight", func() error {
		if n := rt.single.Load() - single0; n != 1 {
			return fmt.Errorf("%d lookups sent", n)
		}
		return nil
	})
	for i := 1; i < keys; i++ {
		wg.Go(func() { read(i) })
	}
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%d lookups queued behind the held one", keys-1), func() error {
		rd.lookups.mu.Lock()
		defer rd.lookups.mu.Unlock()
		if n := len(rd.lookups.queue); n != keys-1 {
			return fmt.Errorf("%d queued", n)
		}
		return nil
	})
	close(rt.release)
	wg.Wait()
	single, many, items := rt.single.Load()-single0, rt.many.Load()-many0, rt.items.Load()-items0
	t.Logf("held: %d lookups alone, %d pipelined round trips with %d lookups in them", single, many, items)
	if single != 1 || many != 2 || items != keys-1 {
		t.Fatalf("%d lookups alone and %d pipelined round trips of %d lookups, want the held one alone and 2 round trips (one per tenant) of %d", single, many, items, keys-1)
	}

	// Unheld: answers stay each key's own however the lookups coincide.
	single0, many0, items0 = rt.single.Load(), rt.many.Load(), rt.items.Load()
	start := make(chan struct{})
	errs2 := make(chan error, keys)
	for i := range keys {
		wg.Go(func() {
			<-start
			tenant := tenants[i%2]
			for n := range rounds {
				if err := check(rd.Get(context.Background(), Query{Tenant: tenant, Item: fmt.Sprintf("k%d", (i+n)%keys)}), tenant, (i+n)%keys); err != nil {
					errs2 <- err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	close(errs2)
	for err := range errs {
		t.Fatal(err)
	}
	for err := range errs2 {
		t.Fatal(err)
	}
	if n := src.reads.Load() - reads0; n != 0 {
		t.Fatalf("%d source reads, want none: every key was cached", n)
	}
	single, many, items = rt.single.Load()-single0, rt.many.Load()-many0, rt.items.Load()-items0
	t.Logf("unheld: %d lookups in %d round trips (%d pipelined, %d lookups in them)", single+items, single+many, many, items)
}

// A round trip that hangs (a Redis node that stopped answering) holds up
// only its own lookups: a lookup queued behind it is sent alone after at
// most maxLookupQueueWait, and answered while the hung one still waits.
// With the queue's wait bound removed it printed: "the read of "b" was
// answered only after the hung lookup's deadline".
func TestHungRoundTripDoesNotHoldQueuedLookups(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "a", 1, `{}`)
	src.set("acme", "b", 2, `{}`)
	rd, rt := newCountedReader(t, rdb, src, func(c *Config) {
		c.FillRate = 0
		c.RequestTimeout, c.LookupTimeout = 20*time.Second, 5*time.Second
	})
	for _, item := range []string{"a", "b"} {
		if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: item}); r.Kind != Found {
			t.Fatalf("priming %s: %d %q", item, r.Kind, r.CacheStatus)
		}
	}
	rt.hang = "a"
	rt.hanging.Store(true)
	hung := make(chan Result, 1)
	go func() { hung <- rd.Get(context.Background(), Query{Tenant: "acme", Item: "a"}) }()
	testenv.Eventually(t, 10*time.Second, "the lookup of a is in flight", func() error {
		rd.lookups.mu.Lock()
		defer rd.lookups.mu.Unlock()
		if !rd.lookups.busy {
			return fmt.Errorf("no round trip in flight")
		}
		return nil
	})
	r := rd.Get(context.Background(), Query{Tenant: "acme", Item: "b"})
	if rt.hangEnded.Load() {
		t.Fatalf("the read of %q was answered only after the hung lookup's deadline", "b")
	}
	if r.Kind != Found || r.Version != 2 {
		t.Fatalf("Get b: kind %d version %d %q, want Found v2", r.Kind, r.Version, r.CacheStatus)
	}
	rt.hanging.Store(false)
	if a := <-hung; a.Kind == Found && a.Version != 1 {
		t.Fatalf("Get a after its lookup hung: version %d %q", a.Version, a.CacheStatus)
	}
}
