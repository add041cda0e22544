package cache_test

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/promise"
)

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	if err := cache.DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	if err := testConfig().Validate(); err != nil {
		t.Fatalf("test config: %v", err)
	}
	cfg := cache.DefaultConfig()
	cfg.Namespace = "a{b}"
	cfg.Lease = 0
	cfg.SoftMin, cfg.SoftMax = 5*time.Second, 3*time.Second
	cfg.MaxAge = time.Second
	err := cfg.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, flag := range []string{"Namespace:", "Lease:", "SoftMax:", "MaxAge:"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error does not name %s: %v", flag, err)
		}
	}
}

func TestParseRedisURL(t *testing.T) {
	for _, tc := range []struct {
		url     string
		cluster bool
		addrs   []string
		db      int
		pass    string
		bad     bool
	}{
		{url: "redis://127.0.0.1:6379/0", addrs: []string{"127.0.0.1:6379"}},
		{url: "redis://:secret@cache:6380/2", addrs: []string{"cache:6380"}, db: 2, pass: "secret"},
		{url: "redis://h1:7000,h2:7001,h3:7002", cluster: true, addrs: []string{"h1:7000", "h2:7001", "h3:7002"}},
		{url: "redis://u:pw@h1:7000,h2:7001/0", cluster: true, addrs: []string{"h1:7000", "h2:7001"}, pass: "pw"},
		{url: "redis://h1:7000,h2:7001/3", bad: true},
		{url: "redis://h1:7000,,h2:7001", bad: true},
		{url: "http://h1:7000", bad: true},
	} {
		c, err := cache.ParseRedisURL(tc.url)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted", tc.url)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		switch r := c.(type) {
		case *redis.Client:
			o := r.Options()
			if tc.cluster || o.Addr != tc.addrs[0] || o.DB != tc.db || o.Password != tc.pass {
				t.Errorf("%s: standalone %s db %d pass %q", tc.url, o.Addr, o.DB, o.Password)
			}
		case *redis.ClusterClient:
			o := r.Options()
			if !tc.cluster || strings.Join(o.Addrs, ",") != strings.Join(tc.addrs, ",") || o.Password != tc.pass {
				t.Errorf("%s: cluster %v pass %q", tc.url, o.Addrs, o.Password)
			}
		}
		c.Close()
	}
	if _, err := cache.ParseRedisURL("redis://:hunter2@h1:1,h2:2/9"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error leaks the password or is missing: %v", err)
	}
}

// The hard lifetime cannot be configured past the promise minus twice the
// clock bound (29.8 s): a longer one would serve values older than 30 s.
func TestHardLifetimeIsBounded(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.HardLifetime = promise.HardLifetime
	if err := cfg.Validate(); err != nil {
		t.Fatalf("hard lifetime %s refused: %v", cfg.HardLifetime, err)
	}
	cfg.HardLifetime = promise.HardLifetime + time.Millisecond
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "HardLifetime:") {
		t.Fatalf("hard lifetime %s: Validate = %v, want a HardLifetime problem", cfg.HardLifetime, err)
	}
}
