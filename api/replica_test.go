package api

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A hot key with published copies is answered from them (L1 off), never at
// or after a copy's deadline, and, once an INVALIDATE of a newer version has
// returned, never with the old version after the manifest lifetime.
func TestHotKeyReplicasServeWithinDeadlineAndInvalidation(t *testing.T) {
	e := newEnv(t)
	soft := 2 * time.Second
	ccfgFn := func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime, c.Lease = soft, soft, 4*time.Second, 300*time.Millisecond
	}
	in := e.instance(instOpts{cfg: func(c *Config) { c.L1Size = 0 }, ccfg: ccfgFn})
	ccfg := testCacheConfig()
	ccfgFn(&ccfg)
	builder := e.newCache(ccfg)
	key := e.apiKey("acme")
	ctx := testenv.Context(t, 60*time.Second)
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'hot', 1, '"one"')`)
	if r := e.do("GET", in.item("hot"), key, ""); r.code != 200 {
		t.Fatalf("cold GET: %d %s", r.code, r.raw)
	}
	snap, err := builder.ReplicaSource(ctx, "acme", "hot", time.Second, 0)
	if err != nil || snap.Status != "ok" {
		t.Fatalf("replica source = %+v, %v", snap, err)
	}
	m, err := builder.BuildReplicas(ctx, "acme", "hot", snap.Entry, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Served from copies until their deadline, then from the primary path.
	replicaReads := 0
	for time.Now().Before(m.Soft.Add(500 * time.Millisecond)) {
		r := e.do("GET", in.item("hot"), key, "")
		got := time.Now()
		if r.code != 200 || r.version() != 1 {
			t.Fatalf("GET: %d %s", r.code, r.raw)
		}
		if strings.Contains(r.cacheStatus(), "detail=replica") {
			replicaReads++
			if !got.Before(m.Soft.Add(20 * time.Millisecond)) {
				t.Fatalf("a copy answered at %s, its deadline was %s", got.Format(time.StampMilli), m.Soft.Format(time.StampMilli))
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if replicaReads == 0 {
		t.Fatal("no GET was answered from a copy")
	}

	// A fresh value and a fresh set; then v2 is committed and applied.
	if r := e.do("GET", in.item("hot"), key, ""); r.code != 200 {
		t.Fatalf("GET: %d %s", r.code, r.raw)
	}
	testenv.Eventually(t, 10*time.Second, "a fresh replica set", func() error {
		snap, err := builder.ReplicaSource(ctx, "acme", "hot", time.Second, 0)
		if err != nil {
			return err
		}
		if snap.Status != "ok" {
			e.do("GET", in.item("hot"), key, "") // refresh the primary
			return errorString("replica source: " + snap.Status)
		}
		m, err = builder.BuildReplicas(ctx, "acme", "hot", snap.Entry, 3)
		return err
	})
	testenv.Eventually(t, 5*time.Second, "a GET from a copy", func() error {
		if r := e.do("GET", in.item("hot"), key, ""); !strings.Contains(r.cacheStatus(), "detail=replica") {
			return errorString("GET: " + r.cacheStatus())
		}
		return nil
	})
	// A batch read of the hot key reads its copy too (Get's path), the
	// other item its primary.
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'cool', 1, '"c"')`)
	testenv.Eventually(t, 5*time.Second, "a batch read of the hot key from a copy", func() error {
		r := e.do("GET", in.url+"/v1/catalog/items:batchGet?id=hot&id=cool", key, "")
		its, _ := r.body["items"].([]any)
		if r.code != 200 || len(its) != 2 {
			return errorString("batch: " + r.raw)
		}
		hot, cool := its[0].(map[string]any), its[1].(map[string]any)
		if cs, _ := cool["cache_status"].(string); cool["version"] != 1.0 || strings.Contains(cs, "replica") {
			t.Fatalf("batch: the item without copies: %v", cool)
		}
		if cs, _ := hot["cache_status"].(string); hot["version"] != 1.0 || !strings.Contains(cs, "detail=replica") {
			return errorString("batch: the hot key: " + cs)
		}
		return nil
	})
	e.exec(`UPDATE catalog.items SET version = 2, display = '"two"' WHERE tenant_id = 'acme' AND item_id = 'hot'`)
	if _, err := builder.Invalidate(ctx, "acme", "hot", 2); err != nil {
		t.Fatal(err)
	}
	invalidated := time.Now()
	for time.Since(invalidated) < time.Second {
		sent := time.Now()
		r := e.do("GET", in.item("hot"), key, "")
		if r.code == 200 && r.version() == 1 && strings.Contains(r.cacheStatus(), "detail=replica") &&
			sent.After(invalidated.Add(DefaultConfig().ReplicaManifestTTL+20*time.Millisecond)) {
			t.Fatalf("GET sent %s after INVALIDATE v2 returned answered v1 from a copy", sent.Sub(invalidated))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := e.do("GET", in.item("hot"), key, ""); r.code != 200 || r.version() != 2 {
		t.Fatalf("GET after the invalidation: %d %s", r.code, r.raw)
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }

// Hot-key replica reads share the primary path's in-process coalescing and
// L1: with a key's copies published, a crowd of GETs costs Redis about the
// commands it costs for a key without copies (L1 absorbs both), not one
// copy read per GET. Logged: Redis commands per GET with replicas on and
// off (INFO commandstats around a fixed number of GETs).
func TestHotKeyReplicaReadsShareL1AndCoalescing(t *testing.T) {
	e := newEnv(t)
	ccfgFn := func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime = 15*time.Second, 15*time.Second, 25*time.Second
	}
	// L1 off, as serve's default --l1-ttl 0: the coalescing alone.
	in := e.instance(instOpts{ccfg: ccfgFn, cfg: func(c *Config) { c.L1Size = 0 }})
	ccfg := testCacheConfig()
	ccfgFn(&ccfg)
	builder := e.newCache(ccfg)
	key := e.apiKey("acme")
	ctx := testenv.Context(t, 60*time.Second)
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'hot', 1, '"one"'), ('acme', 'twin', 1, '"one"')`)
	for _, id := range []string{"hot", "twin"} {
		if r := e.do("GET", in.item(id), key, ""); r.code != 200 {
			t.Fatalf("cold GET %s: %d %s", id, r.code, r.raw)
		}
	}
	snap, err := builder.ReplicaSource(ctx, "acme", "hot", time.Second, 0)
	if err != nil || snap.Status != "ok" {
		t.Fatalf("replica source = %+v, %v", snap, err)
	}
	if _, err := builder.BuildReplicas(ctx, "acme", "hot", snap.Entry, 3); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "a GET from a copy", func() error {
		if r := e.do("GET", in.item("hot"), key, ""); !strings.Contains(r.cacheStatus(), "detail=replica") {
			return errorString("GET: " + r.cacheStatus())
		}
		return nil
	})
	rdb, err := cache.ParseRedisURL(e.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	commands := func() int64 {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, l := range strings.Split(info, "\r\n") {
			if _, stats, ok := strings.Cut(l, ":calls="); ok {
				c, _ := strconv.ParseInt(stats[:strings.IndexByte(stats, ',')], 10, 64)
				n += c
			}
		}
		return n
	}
	const workers, each = 8, 60
	load := func(id string) (perGET float64, status map[string]int) {
		status = map[string]int{}
		var mu sync.Mutex
		before := commands()
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range each {
					r := e.do("GET", in.item(id), key, "")
					if r.code != 200 {
						t.Errorf("GET %s: %d %s", id, r.code, r.raw)
						return
					}
					mu.Lock()
					status[r.cacheStatus()]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return float64(commands()-before-1) / (workers * each), status
	}
	off, offStatus := load("twin")
	on, onStatus := load("hot")
	t.Logf("Redis commands per GET, %d GETs of one key by %d clients: replicas off %.3f %v, on %.3f %v", workers*each, workers, off, offStatus, on, onStatus)
	if on > 1.5*off+0.05 {
		t.Fatalf("Redis commands per GET with replicas on %.3f, off %.3f: copy reads bypass L1 and the per-key coalescing (on: %v)", on, off, onStatus)
	}
}
