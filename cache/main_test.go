package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend is one Redis deployment the suite runs against.
type backend struct {
	name    string
	rdb     redis.UniversalClient
	single  *testenv.Redis        // standalone only
	cluster *testenv.RedisCluster // cluster only
}

// eachBackend runs fn against a private standalone Redis and a private
// 3-master Redis Cluster, as subtests named "standalone" and "cluster".
func eachBackend(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Run("standalone", func(t *testing.T) {
		r := testenv.StartRedis(t)
		fn(t, &backend{name: "standalone", rdb: r.Client(t), single: r})
	})
	t.Run("cluster", func(t *testing.T) {
		rc := testenv.StartRedisCluster(t, 3)
		fn(t, &backend{name: "cluster", rdb: rc.Client(t), cluster: rc})
	})
}

// testConfig shortens every lifetime so that deadlines pass within a test.
func testConfig() cache.Config {
	cfg := cache.DefaultConfig()
	cfg.Lease = 400 * time.Millisecond
	cfg.HardLifetime = 1500 * time.Millisecond
	cfg.SoftMin = 300 * time.Millisecond
	cfg.SoftMax = 500 * time.Millisecond
	cfg.NegativeTTL = 400 * time.Millisecond
	cfg.FloorTTL = 3 * time.Second
	cfg.MaxAge = 10 * time.Second
	cfg.WatermarkPoll = 20 * time.Millisecond
	return cfg
}

func newClient(t *testing.T, b *backend, cfg cache.Config) *cache.Client {
	t.Helper()
	c, err := cache.New(cfg, cache.Deps{Redis: b.rdb, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.LoadScripts(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// tenant returns a tenant name unique to the test, so keys never collide.
func tenant(t *testing.T) string { return testenv.Unique(t, "t") }

func lookup(t *testing.T, c *cache.Client, tenant, item string, minVersion int64) cache.LookupResult {
	t.Helper()
	r, err := c.Lookup(context.Background(), tenant, item, minVersion)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustStatus(t *testing.T, r cache.LookupResult, want cache.Status, wantToken bool) {
	t.Helper()
	if r.Status != want || r.Token.IsZero() == wantToken {
		t.Fatalf("lookup = %s (token %v), want %s (token %v)", r.Status, !r.Token.IsZero(), want, wantToken)
	}
}

func mustReject(t *testing.T, err error, want cache.Reason) {
	t.Helper()
	var rej *cache.RejectedError
	if !errors.As(err, &rej) || rej.Reason != want || !errors.Is(err, cache.ErrRejected) {
		t.Fatalf("fill: got %v, want rejection %q", err, want)
	}
}

func mustFill(t *testing.T, c *cache.Client, tenant, item string, tok cache.Token, version int64, obs time.Time) {
	t.Helper()
	if err := c.Fill(context.Background(), tenant, item, tok, version, payload(version), obs); err != nil {
		t.Fatal(err)
	}
}

func payload(version int64) []byte { return []byte(fmt.Sprintf(`{"v":%d}`, version)) }

// hash reads the item's Redis hash as operators would with HGETALL.
func hash(t *testing.T, b *backend, ns, tenant, item string) map[string]string {
	t.Helper()
	h, err := b.rdb.HGetAll(context.Background(), schema.RedisKey(ns, tenant, item)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// nodeFor returns the testenv server that holds key (standalone: the server).
func (b *backend) nodeFor(t *testing.T, key string) *testenv.Redis {
	t.Helper()
	if b.single != nil {
		return b.single
	}
	m, err := b.rdb.(*redis.ClusterClient).MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range b.cluster.Nodes {
		if n.Addr == m.Options().Addr {
			return n
		}
	}
	t.Fatalf("no node has address %s", m.Options().Addr)
	return nil
}

// restartNodeOf restarts the server holding key with its data lost. A
// restarted Cluster node comes back as a new, empty node (new node id, no
// slots); it is joined again with the slots of the node it replaces, as an
// operator would.
func (b *backend) restartNodeOf(t *testing.T, key string) {
	t.Helper()
	ctx := context.Background()
	n := b.nodeFor(t, key)
	if b.single != nil {
		n.Restart(t)
	} else {
		nc := n.Client(t)
		oldID, err := nc.ClusterMyID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots, err := nc.ClusterSlots(ctx).Result() //nolint:staticcheck // SA1019: as cache/replica.go, slots by master address
		if err != nil {
			t.Fatal(err)
		}
		n.Restart(t)
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, o := range b.cluster.Nodes {
			if o != n {
				must(o.Client(t).ClusterForget(ctx, oldID).Err())
			}
		}
		for _, s := range slots {
			if len(s.Nodes) > 0 && s.Nodes[0].ID == oldID {
				must(nc.ClusterAddSlotsRange(ctx, int(s.Start), int(s.End)).Err())
			}
		}
		// A higher config epoch makes the other nodes accept its claim.
		must(nc.Do(ctx, "CLUSTER", "BUMPEPOCH").Err())
		for _, o := range b.cluster.Nodes {
			if o != n {
				must(nc.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(o.Port)).Err())
			}
		}
		if err := b.cluster.WaitReady(testenv.Context(t, 30*time.Second)); err != nil {
			t.Fatal(err)
		}
		b.rdb.(*redis.ClusterClient).ReloadState(ctx)
	}
	testenv.Eventually(t, 10*time.Second, "key's node answers after restart", func() error {
		return b.rdb.Exists(ctx, key).Err()
	})
}

// moveSlotOf migrates key's slot (with its keys, as redis-cli --cluster
// reshard does) to another master and returns the new owner.
func (b *backend) moveSlotOf(t *testing.T, key string) *testenv.Redis {
	t.Helper()
	ctx := context.Background()
	src := b.nodeFor(t, key)
	var dst *testenv.Redis
	for _, n := range b.cluster.Nodes {
		if n != src {
			dst = n
			break
		}
	}
	sc, dc := src.Client(t), dst.Client(t)
	srcID, dstID := sc.ClusterMyID(ctx).Val(), dc.ClusterMyID(ctx).Val()
	slot := int(sc.ClusterKeySlot(ctx, key).Val())
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(dc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err())
	must(sc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err())
	keys, err := sc.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
	must(err)
	for _, k := range keys {
		must(sc.Migrate(ctx, "127.0.0.1", fmt.Sprint(dst.Port), k, 0, 5*time.Second).Err())
	}
	for _, n := range b.cluster.Nodes {
		must(n.Client(t).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err())
	}
	testenv.Eventually(t, 10*time.Second, "key served by its new node", func() error {
		if n := b.nodeFor(t, key); n != dst {
			b.rdb.(*redis.ClusterClient).ReloadState(ctx)
			return fmt.Errorf("still routed to %s", n.Addr)
		}
		return nil
	})
	return dst
}

// acquire polls Lookup until it hands out a token (a lease held by someone
// else must lapse first).
func acquire(t *testing.T, c *cache.Client, tenant, item string) cache.LookupResult {
	t.Helper()
	var r cache.LookupResult
	testenv.Eventually(t, 5*time.Second, "a lease token", func() error {
		r = lookup(t, c, tenant, item, 0)
		if r.Token.IsZero() {
			return fmt.Errorf("lookup = %s", r.Status)
		}
		return nil
	})
	return r
}
