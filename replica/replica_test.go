package replica_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/replica"
)

// cacheConfig has short lifetimes so deadlines pass within a test, and a
// soft window long enough for sets to be rebuilt before it ends.
func cacheConfig() cache.Config {
	cfg := cache.DefaultConfig()
	cfg.Lease = 400 * time.Millisecond
	cfg.HardLifetime = 3 * time.Second
	cfg.SoftMin, cfg.SoftMax = 1500*time.Millisecond, 2*time.Second
	cfg.FloorTTL, cfg.MaxAge = 5*time.Second, 20*time.Second
	return cfg
}

func newCache(t *testing.T, rdb redis.UniversalClient) *cache.Client {
	t.Helper()
	c, err := cache.New(cacheConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fill installs version of (tenant, item) through a lease, as a reader that
// missed would.
func fill(t *testing.T, c *cache.Client, tenant, item string, version int64) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 5*time.Second, "a filled value", func() error {
		r, err := c.Lookup(ctx, tenant, item, 0)
		if err != nil {
			return err
		}
		if r.Token.IsZero() {
			return fmt.Errorf("lookup = %s without a lease", r.Status)
		}
		return c.Fill(ctx, tenant, item, r.Token, version, []byte(fmt.Sprintf(`{"v":%d}`, version)), time.Now())
	})
}

func builderConfig() replica.Config {
	cfg := replica.DefaultConfig()
	cfg.Threshold, cfg.Replicas = 100, 3
	cfg.Interval, cfg.RenewBefore = 50*time.Millisecond, 700*time.Millisecond
	cfg.ManifestTTL = 200 * time.Millisecond
	return cfg
}

// A key above the threshold in the fast hot set gets N copies on distinct
// masters; a key below it gets none.
func TestHotKeyAboveThresholdGetsCopies(t *testing.T) {
	rc := testenv.StartRedisCluster(t, 3)
	rdb := rc.Client(t)
	ctx := testenv.Context(t, 30*time.Second)
	c := newCache(t, rdb)
	now := time.Unix(1_800_000_000, 0)
	tr, err := hotset.New(hotset.DefaultConfig(), hotset.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for range 300 { // 300 reads in the first second: 118/s after one tick of the 2 s time constant
		tr.Observe("t1", "hot")
	}
	for range 5 {
		tr.Observe("t1", "cold")
	}
	now = now.Add(time.Second)
	if err := tr.PublishFast(ctx); err != nil {
		t.Fatal(err)
	}
	fill(t, c, "t1", "hot", 4)
	fill(t, c, "t1", "cold", 4)
	reg := prometheus.NewRegistry()
	b, err := replica.New(builderConfig(), replica.Deps{Cache: c, Hot: wiring.HotKeys(rdb, "catalog"), Log: testenv.Logger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	hot, err := c.Lookup(ctx, "t1", "hot", 0)
	if err != nil {
		t.Fatal(err)
	}
	if hot.Replicas == nil || hot.Replicas.N() != 3 || hot.Replicas.Version != 4 {
		t.Fatalf("hot key: lookup %s with manifest %v, want 3 copies of v4", hot.Status, hot.Replicas)
	}
	masters := map[string]bool{}
	for i := range 3 {
		n, err := rdb.MasterForKey(ctx, cache.ReplicaKey("catalog", "t1", "hot", hot.Replicas.Set, i, hot.Replicas.Salts[i]))
		if err != nil {
			t.Fatal(err)
		}
		masters[n.Options().Addr] = true
	}
	if len(masters) != 3 {
		t.Fatalf("copies on %d masters, want 3", len(masters))
	}
	if cold, err := c.Lookup(ctx, "t1", "cold", 0); err != nil || cold.Replicas != nil {
		t.Fatalf("cold key: manifest %v (%v), want none", cold.Replicas, err)
	}
	if got := testenv.Metric(t, reg, "tidemark_replica_hot_keys"); got != 1 {
		t.Fatalf("tidemark_replica_hot_keys = %v, want 1", got)
	}
	if got := testenv.Metric(t, reg, "tidemark_replica_manifest_switches_total"); got != 1 {
		t.Fatalf("tidemark_replica_manifest_switches_total = %v, want 1", got)
	}
}

func TestCopiesSizedFromRate(t *testing.T) {
	cfg := replica.DefaultConfig()
	cfg.SafeQPSPerShard, cfg.AutoFactor, cfg.MaxReplicas = 10000, 1.5, 8
	for _, c := range []struct {
		rate float64
		want int
	}{{500, 2}, {10000, 2}, {25000, 5}, {1e6, 8}} {
		if got := cfg.Copies(c.rate); got != c.want {
			t.Errorf("Copies(%v) = %d, want %d", c.rate, got, c.want)
		}
	}
	cfg.Replicas = 3
	if got := cfg.Copies(1e6); got != 3 {
		t.Errorf("fixed Replicas: Copies = %d, want 3", got)
	}
}

// readRecord is one answer a reader served.
type readRecord struct {
	start      time.Time // before the read
	version    int64
	copy       bool
	soft, hard time.Time // of the copy
}

type lookupRecord struct {
	sent     time.Time
	manifest int64 // version of the manifest the lookup handed out; 0: none
}

type invalidation struct {
	version  int64
	returned time.Time
}

// While versions change and sets switch under readers: no copy is served past
// its deadline; no reader steps back to an older version; a lookup sent after
// an INVALIDATE returned never hands out a manifest of an older version; and
// a copy of an older version is served only while a manifest learnt before
// the invalidation may still be held (ManifestTTL).
func TestReadsDuringSwitchesNeverOlderOrExpired(t *testing.T) {
	rc := testenv.StartRedisCluster(t, 3)
	rdb := rc.Client(t)
	ctx := testenv.Context(t, 60*time.Second)
	c := newCache(t, rdb)
	cfg := builderConfig()
	b, err := replica.New(cfg, replica.Deps{Cache: c, Hot: wiring.HotKeys(rdb, "catalog"), Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	r, err := replica.NewReader(c, cfg.ManifestTTL, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const readers = 4
	var (
		mu      sync.Mutex
		reads   [readers][]readRecord
		lookups [readers][]lookupRecord
		invals  []invalidation
		copies  int
		source  atomic.Int64 // the item's version at the source
	)
	source.Store(1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for id := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				if e, ok := r.Read(ctx, "t1", "hot", 0, uint64(id)); ok {
					mu.Lock()
					reads[id] = append(reads[id], readRecord{start: start, version: e.Version, copy: true, soft: e.Soft, hard: e.Hard})
					copies++
					mu.Unlock()
					continue
				}
				lr, err := c.Lookup(ctx, "t1", "hot", 0)
				if err != nil {
					continue
				}
				if !lr.Token.IsZero() { // the lease is ours: read the "source" and fill, as the API does
					v := source.Load()
					_ = c.Fill(ctx, "t1", "hot", lr.Token, v, []byte(fmt.Sprintf(`{"v":%d}`, v)), start)
				}
				var m *cache.Manifest
				if lr.Status == cache.StatusHit {
					m = lr.Replicas
				}
				r.Offer("t1", "hot", m, start)
				mu.Lock()
				lk := lookupRecord{sent: start}
				if m != nil {
					lk.manifest = m.Version
				}
				lookups[id] = append(lookups[id], lk)
				if lr.Status == cache.StatusHit {
					reads[id] = append(reads[id], readRecord{start: start, version: lr.Entry.Version})
				}
				mu.Unlock()
			}
		}()
	}
	for v := int64(1); v <= 6; v++ {
		if v > 1 {
			source.Store(v)
			if _, err := c.Invalidate(ctx, "t1", "hot", v); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			invals = append(invals, invalidation{version: v, returned: time.Now()})
			mu.Unlock()
		}
		// The readers refill the new version; then a set of it is built.
		testenv.Eventually(t, 5*time.Second, "a set of the new version", func() error {
			if ok, err := b.Ensure(ctx, "t1", "hot", 3); !ok || err != nil {
				return fmt.Errorf("ensure = %v, %v", ok, err)
			}
			lr, err := c.Lookup(ctx, "t1", "hot", 0)
			if err != nil || lr.Replicas == nil || lr.Replicas.Version != v {
				return fmt.Errorf("lookup %s with manifest %v (%v)", lr.Status, lr.Replicas, err)
			}
			return nil
		})
		mu.Lock()
		before := copies
		mu.Unlock()
		testenv.Eventually(t, 5*time.Second, "readers served from copies", func() error {
			mu.Lock()
			defer mu.Unlock()
			if copies < before+200 {
				return fmt.Errorf("%d copy reads since the switch", copies-before)
			}
			return nil
		})
	}
	close(done)
	wg.Wait()

	for id := range readers {
		var last int64
		for _, rd := range reads[id] {
			if rd.version < last {
				t.Fatalf("reader %d stepped back from v%d to v%d", id, last, rd.version)
			}
			last = rd.version
			if !rd.copy {
				continue
			}
			if !rd.start.Before(rd.soft) || rd.soft.After(rd.hard) {
				t.Fatalf("reader %d: copy v%d read at %s, deadline %s (hard %s)", id, rd.version,
					rd.start.Format(time.StampMilli), rd.soft.Format(time.StampMilli), rd.hard.Format(time.StampMilli))
			}
			for _, in := range invals {
				if in.version > rd.version && !rd.start.Before(in.returned.Add(cfg.ManifestTTL)) {
					t.Fatalf("reader %d: copy v%d read %s after INVALIDATE v%d returned (manifests are held %s)",
						id, rd.version, rd.start.Sub(in.returned), in.version, cfg.ManifestTTL)
				}
			}
		}
		for _, lk := range lookups[id] {
			for _, in := range invals {
				if lk.manifest != 0 && lk.manifest < in.version && lk.sent.After(in.returned) {
					t.Fatalf("reader %d: lookup sent %s after INVALIDATE v%d returned handed out a manifest of v%d",
						id, lk.sent.Sub(in.returned), in.version, lk.manifest)
				}
			}
		}
	}
	if copies == 0 {
		t.Fatal("no read was served from a copy")
	}
}
