package reader

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A miss the source budget refuses gives its fill lease back: the key's
// next reader, in this process or another, asks the budget at once instead
// of waiting out a lease no fill will come for (which left a ramp's budget
// mostly unspent while its readers timed out).
func TestRefusedMissGivesTheLeaseBack(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "a", 1, `{"n":1}`)
	src.set("acme", "b", 1, `{"n":2}`)
	// One foreground read every 5 s: once one is admitted, the next is refused.
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.ForegroundRate, c.L1Size = 0.2, 0 }, nil)
	ctx := testenv.Context(t, 30*time.Second)
	// A fresh budget starts empty: the first read waits for its first slot.
	testenv.Eventually(t, 20*time.Second, "the first miss is admitted", func() error {
		if r := rd.Get(ctx, Query{Tenant: "acme", Item: "a"}); r.Kind != Found {
			return fmt.Errorf("answered %d %q", r.Kind, r.CacheStatus)
		}
		return nil
	})
	r := rd.Get(ctx, Query{Tenant: "acme", Item: "b"})
	if r.Kind != Unavailable || !strings.Contains(r.CacheStatus, "detail=budget") {
		t.Fatalf("second miss within the budget's interval: %d %q, want Unavailable detail=budget", r.Kind, r.CacheStatus)
	}
	lr, err := rd.cache.Lookup(ctx, "acme", "b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Status != cache.StatusMiss || lr.Token.IsZero() {
		t.Fatalf("lookup right after the refused miss: %s (token %v), want a miss with a lease (wait: the refused read kept the key's lease)",
			lr.Status, !lr.Token.IsZero())
	}
}

// A min_version the source refuses (far above its version) gives back the
// lease its LOOKUP took, so the key's next reader is not kept waiting.
func TestRefusedMinVersionGivesTheLeaseBack(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	src := newMemSource()
	src.set("acme", "old", 5000, `"one"`)
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.MinVersionSlack, c.L1Size = 10, 0 }, nil)
	ctx := testenv.Context(t, 30*time.Second)
	r := getAdmitted(t, rd, Query{Tenant: "acme", Item: "old", MinVersion: 99999})
	if r.Kind != BadMinVersion || r.Version != 5000 {
		t.Fatalf("min_version=99999 on an item at 5000: %d version %d %q, want BadMinVersion with version 5000", r.Kind, r.Version, r.CacheStatus)
	}
	if tok := rdb.HGet(ctx, schema.RedisKey("catalog", "acme", "old"), "tok").Val(); tok != "" {
		t.Fatalf("after the refused min_version the key still holds lease %q: the refusal must release the lease its LOOKUP took", tok)
	}
}
