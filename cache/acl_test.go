package cache_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/tlsfiles"
	"github.com/tidemark/tidemark/lab/testenv"
)

// The cache tier works over TLS (a test-made CA, a client certificate) as
// a Redis ACL user holding only cache.ACLRules, the password given only as
// a file, on one redis-server and on a Redis Cluster over TLS (tls-cluster)
// reached through one node's address in auto mode, as a Cluster
// configuration endpoint is; the same user without the CA, or with the
// wrong password, is refused.
func TestCacheTierOverTLSAsACLUser(t *testing.T) {
	dir := t.TempDir()
	srv, certs := testenv.StartRedisTLS(t, filepath.Join(dir, "certs"))
	cluster := testenv.StartRedisClusterTLS(t, 3, certs)
	ctx := testenv.Context(t, time.Minute)
	const ns = "catalog"
	pwFile := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name    string
		url     string
		nodes   []string // plain ports, where the operator sets the user up
		cluster bool
	}{
		{"one redis-server", "rediss://" + srv.TLSAddr + "/0", []string{srv.Addr}, false},
		{"a Cluster through one node's address", "rediss://" + cluster.Nodes[0].TLSAddr, cluster.Addrs(), true},
	} {
		t.Run(d.name, func(t *testing.T) {
			for _, n := range d.nodes {
				testenv.SetACLUser(t, n, "tidemark", "s3cret", cache.ACLRules(ns))
			}
			rc := cache.RedisConfig{URL: d.url, Mode: cache.ModeAuto, Username: "tidemark", PasswordFile: pwFile,
				TLS: tlsfiles.Config{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}}
			rdb, err := cache.OpenRedis(rc, testenv.Logger(t))
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			if _, ok := rdb.(*redis.ClusterClient); ok != d.cluster {
				t.Fatalf("auto mode on %s gave a %T, want a Cluster client: %v", d.url, rdb, d.cluster)
			}
			ccfg := cache.DefaultConfig()
			ccfg.Namespace = ns
			c, err := cache.New(ccfg, cache.Deps{Redis: rdb, Log: testenv.Logger(t)})
			if err != nil {
				t.Fatal(err)
			}
			step := func(what string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("as ACL user %q over TLS: %s: %v", cache.ACLRules(ns), what, err)
				}
			}
			step("load scripts", c.LoadScripts(ctx))
			step("eviction policy", c.CheckEvictionPolicy(ctx))
			srv, err := c.ServerIdentity(ctx)
			step("server identity", err)
			// Items over every master's slots on the Cluster.
			var invs []cache.Invalidation
			for i := 1; i <= 12; i++ {
				item := "i" + strconv.Itoa(i)
				lr, err := c.Lookup(ctx, "acme", item, 0)
				step("lookup", err)
				if lr.Status != cache.StatusMiss {
					t.Fatalf("first lookup of %s: %s, want miss", item, lr.Status)
				}
				step("fill", c.Fill(ctx, "acme", item, lr.Token, 1, []byte(`"x"`), time.Now()))
				lr, err = c.Lookup(ctx, "acme", item, 0)
				step("lookup after fill", err)
				if lr.Status != cache.StatusHit {
					t.Fatalf("lookup of %s after fill: %s, want hit", item, lr.Status)
				}
				invs = append(invs, cache.Invalidation{Tenant: "acme", Item: item, Version: 2})
			}
			_, err = c.InvalidateBatch(ctx, invs)
			step("invalidate", err)
			step("purge", c.Purge(ctx, "acme", "i20"))
			step("partitions", c.SetPartitions(ctx, 3))
			id, err := c.BindWatermarkIdentity(ctx, srv)
			step("bind watermark identity", err)
			step("watermark", c.SetWatermarkIdentity(ctx, 0, time.Now(), id))
			step("reset_at", c.SetResetAt(ctx, time.Now()))
			_, err = c.ReadWatermark(ctx)
			step("read watermark", err)
			step("server clock", rdb.Time(ctx).Err())

			for what, bad := range map[string]cache.RedisConfig{
				"the system CAs only": {URL: rc.URL, Mode: cache.ModeStandalone, Username: "tidemark", Password: "s3cret"},
				"a wrong password":    {URL: rc.URL, Mode: cache.ModeStandalone, Username: "tidemark", Password: "nope", TLS: tlsfiles.Config{CAFile: certs.CA}},
			} {
				b, err := cache.OpenRedis(bad, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Ping(ctx).Err(); err == nil {
					t.Errorf("connected with %s", what)
				}
				b.Close()
			}
		})
	}
}

// The README's Redis ACL line is the rule set the test above runs under.
func TestREADMEHasTheACLRules(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "ACL SETUSER tidemark on >PASSWORD " + cache.ACLRules("catalog")
	if !strings.Contains(string(b), want) {
		t.Fatalf("README.md lacks the Redis ACL line %q", want)
	}
}
