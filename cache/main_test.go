package cache_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"tidemark/cache"
	"tidemark/internal/testenv"
	"tidemark/schema"
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
	c, err := cache.New(cfg, b.rdb, testenv.Logger(t), prometheus.NewRegistry())
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
