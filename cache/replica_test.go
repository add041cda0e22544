package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// publishReplicas fills (tenant, item) at version and publishes n copies.
func publishReplicas(t *testing.T, c *cache.Client, tenant, item string, version int64, n int) cache.Manifest {
	t.Helper()
	ctx := context.Background()
	r := acquire(t, c, tenant, item)
	mustFill(t, c, tenant, item, r.Token, version, time.Now())
	snap, err := c.ReplicaSource(ctx, tenant, item, time.Second, 0)
	if err != nil || snap.Status != "ok" {
		t.Fatalf("replica source = %+v, %v; want ok", snap, err)
	}
	m, err := c.BuildReplicas(ctx, tenant, item, snap.Entry, n)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestReplicasLandOnDistinctMastersWithThePrimarysDeadlines(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		// Entries that outlive the test: at testConfig's 300-500 ms a loaded
		// box let a copy pass its deadline before it was read ("verify copy
		// 0: … missing"), which is a copy rightly refused, not this test's
		// subject.
		cfg := testConfig()
		cfg.SoftMin, cfg.SoftMax, cfg.HardLifetime, cfg.FloorTTL, cfg.MaxAge = 20*time.Second, 25*time.Second, 28*time.Second, 30*time.Second, time.Minute
		c := newClient(t, b, cfg)
		ten := tenant(t)
		// Several keys: three copies could land on three masters by chance.
		for _, item := range []string{"hot-a", "hot-b", "hot-c", "hot-d", "hot-e"} {
			m := publishReplicas(t, c, ten, item, 7, 3)
			prim := lookup(t, c, ten, item, 0)
			if prim.Status != cache.StatusHit || prim.Replicas == nil || prim.Replicas.String() != m.String() {
				t.Fatalf("lookup = %s with manifest %v, want a hit carrying %v", prim.Status, prim.Replicas, m)
			}
			masters := map[string]bool{}
			for i := range m.N() {
				e, err := c.ReadReplica(ctx, ten, item, m, i)
				if err != nil {
					t.Fatal(err)
				}
				// The copy inherits the primary's observation and absolute
				// deadlines: it is never a fresh 30 s.
				if e.Version != 7 || string(e.Payload) != string(payload(7)) || !e.Hard.Equal(prim.Entry.Hard) ||
					!e.Soft.Equal(prim.Entry.Soft) || !e.Obs.Equal(prim.Entry.Obs) {
					t.Fatalf("copy %d = %+v, primary %+v", i, e, prim.Entry)
				}
				if cc, ok := b.rdb.(*redis.ClusterClient); ok {
					n, err := cc.MasterForKey(ctx, cache.ReplicaKey("catalog", ten, item, m.Set, i, m.Salts[i]))
					if err != nil {
						t.Fatal(err)
					}
					masters[n.Options().Addr] = true
				}
			}
			if b.cluster != nil && len(masters) != 3 {
				t.Fatalf("%s: 3 copies on %d masters (%v), want 3", item, len(masters), masters)
			}
		}
	})
}

func TestInvalidateRevokesReplicaManifest(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := newClient(t, b, testConfig())
		ten := tenant(t)
		publishReplicas(t, c, ten, "hot", 7, 3)
		if _, err := c.Invalidate(ctx, ten, "hot", 8); err != nil {
			t.Fatal(err)
		}
		if rep := hash(t, b, "catalog", ten, "hot")[cache.FieldReplicas]; rep != "" {
			t.Fatalf("after INVALIDATE of v8 the primary still publishes %q", rep)
		}
		// Once the newer version is filled, its lookups carry no manifest of
		// the older version either.
		r := acquire(t, c, ten, "hot")
		mustFill(t, c, ten, "hot", r.Token, 8, time.Now())
		if r := lookup(t, c, ten, "hot", 0); r.Status != cache.StatusHit || r.Replicas != nil {
			t.Fatalf("lookup after refill = %s with manifest %v, want a hit without one", r.Status, r.Replicas)
		}
	})
}

func TestReplicaSetOfASupersededVersionIsNeverPublished(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := newClient(t, b, testConfig())
		ten := tenant(t)
		r := acquire(t, c, ten, "hot")
		mustFill(t, c, ten, "hot", r.Token, 7, time.Now())
		snap, err := c.ReplicaSource(ctx, ten, "hot", time.Second, 0)
		if err != nil || snap.Status != "ok" {
			t.Fatalf("replica source = %+v, %v", snap, err)
		}
		// The invalidation lands while the copies are being built.
		if _, err := c.Invalidate(ctx, ten, "hot", 8); err != nil {
			t.Fatal(err)
		}
		if _, err := c.BuildReplicas(ctx, ten, "hot", snap.Entry, 3); !errors.Is(err, cache.ErrReplicaSet) {
			t.Fatalf("build after invalidation: %v, want ErrReplicaSet", err)
		}
		if rep := hash(t, b, "catalog", ten, "hot")[cache.FieldReplicas]; rep != "" {
			t.Fatalf("a set of superseded v7 was published: %q", rep)
		}
	})
}

func TestExpiredReplicaIsNotServed(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		c := newClient(t, b, testConfig())
		ten := tenant(t)
		m := publishReplicas(t, c, ten, "hot", 7, 3)
		testenv.Eventually(t, 5*time.Second, "copies past their deadline refused", func() error {
			for i := range m.N() {
				e, err := c.ReadReplica(ctx, ten, "hot", m, i)
				if err == nil {
					if now := time.Now(); now.After(e.Soft.Add(50 * time.Millisecond)) {
						t.Fatalf("copy %d served at %s, its deadline was %s", i, now.Format(time.StampMilli), e.Soft.Format(time.StampMilli))
					}
					return errors.New("copy still served")
				}
				if !errors.Is(err, cache.ErrReplicaUnusable) {
					t.Fatal(err)
				}
			}
			return nil
		})
		if !time.Now().After(m.Soft) {
			t.Fatalf("copies refused at %s, before their deadline %s", time.Now().Format(time.StampMilli), m.Soft.Format(time.StampMilli))
		}
	})
}
