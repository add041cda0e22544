package api

import (
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// serve's replica settings reach its reader, and a copy's answer is mapped
// to HTTP as a primary hit is: a GET of a hot key with published copies is
// a 200 whose Cache-Status names the copy and carries the ttl left, and a
// batch read answers the hot key from its copy with the item's own
// cache_status. The replica behaviour itself (deadlines, invalidation,
// coalescing, L1) is package reader's TestHotKeyReplicas* tests.
func TestHotKeyReplicaAnswerOverHTTP(t *testing.T) {
	e := newEnv(t)
	ccfgFn := func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime = 15*time.Second, 15*time.Second, 25*time.Second
	}
	in := e.instance(instOpts{cfg: func(c *Config) { c.L1Size = 0 }, ccfg: ccfgFn})
	ccfg := testCacheConfig()
	ccfgFn(&ccfg)
	builder := e.newCache(ccfg)
	key := e.apiKey("acme")
	ctx := testenv.Context(t, 60*time.Second)
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'hot', 1, '"one"'), ('acme', 'cool', 1, '"c"')`)
	if r := e.do("GET", in.item("hot"), key, ""); r.code != 200 {
		t.Fatalf("cold GET: %d %s", r.code, r.raw)
	}
	snap, err := builder.ReplicaSource(ctx, "acme", "hot", time.Second, 0)
	if err != nil || snap.Status != "ok" {
		t.Fatalf("replica source = %+v, %v", snap, err)
	}
	if _, err := builder.BuildReplicas(ctx, "acme", "hot", snap.Entry, 3); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a GET from a copy", func() error {
		r := e.do("GET", in.item("hot"), key, "")
		if r.code != 200 || r.version() != 1 || r.cacheStatus() != "tidemark; hit; detail=replica" {
			return errorString("GET: " + r.header.Get("Cache-Status") + " " + r.raw)
		}
		if r.header.Get("Age") == "" {
			t.Fatalf("a copy's answer without Age: %v", r.header)
		}
		return nil
	})
	testenv.Eventually(t, 10*time.Second, "a batch read of the hot key from a copy", func() error {
		r := e.do("GET", in.url+"/v1/catalog/items:batchGet?id=hot&id=cool", key, "")
		its, _ := r.body["items"].([]any)
		if r.code != 200 || len(its) != 2 {
			return errorString("batch: " + r.raw)
		}
		hot, cool := its[0].(map[string]any), its[1].(map[string]any)
		if cs, _ := cool["cache_status"].(string); strings.Contains(cs, "replica") {
			t.Fatalf("batch: the item without copies: %v", cool)
		}
		if cs, _ := hot["cache_status"].(string); hot["version"] != 1.0 || !strings.Contains(cs, "detail=replica") {
			return errorString("batch: the hot key: " + cs)
		}
		return nil
	})
}

type errorString string

func (e errorString) Error() string { return string(e) }
