package testenv

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/lab/localserver"
)

// Redis is a private redis-server process. Data lives in memory only, so a
// Restart loses everything and gets a new run_id, as a real restart would.
type Redis struct {
	*localserver.Redis
}

// StartRedis starts a private redis-server for one test.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	needServer(t, "StartRedis")
	r, err := startRedis(localserver.RedisConfig{})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(r.Remove)
	return r
}

func startRedis(cfg localserver.RedisConfig) (*Redis, error) {
	dir, err := os.MkdirTemp("", "tidemark-redis-")
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	r, err := localserver.NewRedis(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &Redis{r}, nil
}

// StartRedisTLS makes a test CA and certificates in dir
// (localserver.MakeCerts) and starts a private redis-server for one test
// that also serves TLS with them (TLSAddr); the plain port (Addr) stays
// the operator's.
func StartRedisTLS(t testing.TB, dir string) (*Redis, localserver.Certs) {
	t.Helper()
	needServer(t, "StartRedisTLS")
	certs, err := localserver.MakeCerts(dir)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	r, err := startRedis(localserver.RedisConfig{TLS: &certs})
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(r.Remove)
	return r, certs
}

// SetACLUser makes user, with password pw, hold exactly rules (ACL SETUSER
// user reset on >pw rules...) on the redis-server at addr, reached on its
// plain port as the operator would.
func SetACLUser(t testing.TB, addr, user, pw, rules string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	defer admin.Close()
	args := []any{"ACL", "SETUSER", user, "reset", "on", ">" + pw}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("testenv: ACL SETUSER %s %s on %s: %v", user, rules, addr, err)
	}
}

// Restart stops and starts the server on the same port: empty data, new run_id.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	r.Stop()
	if err := r.Start(); err != nil {
		t.Fatalf("testenv: restart redis: %v", err)
	}
}

// Client returns a go-redis client for the server, closed when the test ends.
func (r *Redis) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// RedisCluster is a Redis Cluster of private redis-server masters with the
// 16384 slots split evenly and no replicas.
type RedisCluster struct {
	Nodes []*Redis
}

// StartRedisCluster starts n masters and forms a cluster.
func StartRedisCluster(t testing.TB, n int) *RedisCluster {
	t.Helper()
	needServer(t, "StartRedisCluster")
	return startRedisCluster(t, n, nil)
}

// StartRedisClusterTLS starts n masters that also serve TLS with certs,
// on their cluster bus too, and forms a cluster: TLS clients are told the
// TLS ports (TLSURL), the plain ports stay for the harness.
func StartRedisClusterTLS(t testing.TB, n int, certs localserver.Certs) *RedisCluster {
	t.Helper()
	needServer(t, "StartRedisClusterTLS")
	return startRedisCluster(t, n, &certs)
}

func startRedisCluster(t testing.TB, n int, certs *localserver.Certs) *RedisCluster {
	t.Helper()
	rc := &RedisCluster{}
	for i := 0; i < n; i++ {
		r, err := startRedis(localserver.RedisConfig{Cluster: true, TLS: certs})
		if err != nil {
			t.Fatalf("testenv: %v", err)
		}
		t.Cleanup(r.Remove)
		rc.Nodes = append(rc.Nodes, r)
	}
	if err := rc.form(); err != nil {
		t.Fatalf("testenv: form redis cluster: %v", err)
	}
	return rc
}

// Addrs lists the nodes' addresses.
func (rc *RedisCluster) Addrs() []string {
	var a []string
	for _, r := range rc.Nodes {
		a = append(a, r.Addr)
	}
	return a
}

// URL is a comma-separated seed list usable as tidemark's --redis value.
func (rc *RedisCluster) URL() string {
	return "redis://" + strings.Join(rc.Addrs(), ",")
}

// TLSURL is a rediss:// seed list of the nodes' TLS ports.
func (rc *RedisCluster) TLSURL() string {
	var a []string
	for _, r := range rc.Nodes {
		a = append(a, r.TLSAddr)
	}
	return "rediss://" + strings.Join(a, ",")
}

func (rc *RedisCluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return localserver.FormCluster(ctx, rc.servers())
}

func (rc *RedisCluster) servers() []*localserver.Redis {
	var s []*localserver.Redis
	for _, r := range rc.Nodes {
		s = append(s, r.Redis)
	}
	return s
}

// WaitReady waits until every node reports cluster_state:ok and knows all nodes.
func (rc *RedisCluster) WaitReady(ctx context.Context) error {
	return localserver.WaitClusterReady(ctx, rc.servers())
}

// Client returns a cluster client, closed when the test ends.
func (rc *RedisCluster) Client(t testing.TB) *redis.ClusterClient {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}
