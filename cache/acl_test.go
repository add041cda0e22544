package cache_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"tidemark/cache"
	"tidemark/internal/tlsfiles"
	"tidemark/lab/localserver"
	"tidemark/lab/testenv"
)

// The cache tier works over TLS (a test-made CA, a client certificate) as
// a Redis ACL user holding only cache.ACLRules, the password given only as
// a file; the same user without the CA, or with the wrong password, is
// refused.
func TestCacheTierOverTLSAsACLUser(t *testing.T) {
	dir := t.TempDir()
	certs, err := localserver.MakeCerts(filepath.Join(dir, "certs"))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := localserver.NewRedis(localserver.RedisConfig{Dir: filepath.Join(dir, "redis"), TLS: &certs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Remove)
	ctx := testenv.Context(t, time.Minute)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	const ns = "catalog"
	args := []any{"ACL", "SETUSER", "tidemark", "on", ">s3cret"}
	for _, r := range strings.Fields(cache.ACLRules(ns)) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", cache.ACLRules(ns), err)
	}
	pwFile := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rc := cache.RedisConfig{URL: "rediss://" + srv.TLSAddr + "/0", Mode: cache.ModeAuto, Username: "tidemark", PasswordFile: pwFile,
		TLS: tlsfiles.Config{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}}
	rdb, err := cache.OpenRedis(rc, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
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
	_, err = c.ServerIdentity(ctx)
	step("server identity", err)
	lr, err := c.Lookup(ctx, "acme", "i1", 0)
	step("lookup", err)
	if lr.Status != cache.StatusMiss {
		t.Fatalf("first lookup: %s, want miss", lr.Status)
	}
	step("fill", c.Fill(ctx, "acme", "i1", lr.Token, 1, []byte(`"x"`), time.Now()))
	lr, err = c.Lookup(ctx, "acme", "i1", 0)
	step("lookup after fill", err)
	if lr.Status != cache.StatusHit {
		t.Fatalf("lookup after fill: %s, want hit", lr.Status)
	}
	_, err = c.InvalidateBatch(ctx, []cache.Invalidation{{Tenant: "acme", Item: "i1", Version: 2}})
	step("invalidate", err)
	step("purge", c.Purge(ctx, "acme", "i2"))
	step("partitions", c.SetPartitions(ctx, 3))
	step("watermark", c.SetWatermarkIdentity(ctx, 0, time.Now(), "id"))
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
