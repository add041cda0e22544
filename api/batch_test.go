package api

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A batch read answers each item as its own GET: version, tenant-scoped
// ETag, age and Cache-Status per item (a miss filled, a hit, a cached
// absence, another tenant's item absent, an invalidated item read again
// from the source), in the request's order with a
// repeated id answered twice, and its cache lookups take one round trip:
// Redis processes a handful of reads (socket read events) for 20 items, not
// one per item as 20 GETs do.
func TestBatchGetAnswersEachItemAsItsOwnGet(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{ccfg: longSoft, cfg: func(c *Config) { c.L1Size = 0 }})
	key, other := e.apiKey("acme"), e.apiKey("globex")
	const n = 20
	var ids []string
	for i := range n {
		id := fmt.Sprintf("b%02d,x", i) // a comma in an id is fine: ids are repeated parameters
		ids = append(ids, id)
		if r := e.do("POST", in.url+"/v1/catalog/items", key, fmt.Sprintf(`{"item_id":%q,"display":{"n":%d}}`, id, i)); r.code != 201 {
			t.Fatalf("create %s: %d %s", id, r.code, r.raw)
		}
	}
	if r := e.do("POST", in.url+"/v1/catalog/items", other, `{"item_id":"theirs","display":{"secret":1}}`); r.code != 201 {
		t.Fatalf("create theirs: %d %s", r.code, r.raw)
	}
	batchURL := func(ids ...string) string {
		q := url.Values{"id": ids}
		return in.url + "/v1/catalog/items:batchGet?" + q.Encode()
	}
	items := func(r resp) []map[string]any {
		t.Helper()
		if r.code != 200 || r.header.Get("Cache-Control") != "private, no-store" || r.header.Get("Vary") != "Authorization" {
			t.Fatalf("batch: %d %v %s", r.code, r.header, r.raw)
		}
		raw, _ := r.body["items"].([]any)
		var out []map[string]any
		for _, it := range raw {
			out = append(out, it.(map[string]any))
		}
		return out
	}

	// A fresh Redis holds no budget buckets, and a missing bucket restarts
	// with one read in it (reader/budget.lua: a lost node never hands out a
	// fresh burst), so the batch's concurrent fills below would race its
	// refill. One source read first creates the buckets; by the time it has
	// answered they hold more than the batch's five reads.
	if r := e.do("GET", in.item("warm-the-budget"), key, ""); r.code != 404 {
		t.Fatalf("first source read: %d %s", r.code, r.raw)
	}

	// Cold: every item a miss filled under its lease, then the absent ones.
	got := items(e.do("GET", batchURL(append(ids[:3:3], "none", "theirs", ids[0])...), key, ""))
	if len(got) != 6 {
		t.Fatalf("%d answers for 6 ids: %v", len(got), got)
	}
	for i, it := range got[:3] {
		if it["item_id"] != ids[i] || it["status"] != 200.0 || it["version"] != 1.0 || it["cache_status"] != "tidemark; fwd=miss; stored; ttl="+ttlOf(t, it) ||
			it["etag"] != fmt.Sprintf(`"1.%s"`, tenantTag("acme")) || it["age"] == nil || it["display"].(map[string]any)["n"] != float64(i) {
			t.Errorf("cold item %d: %v", i, it)
		}
	}
	for _, it := range got[3:5] {
		if it["status"] != 404.0 || it["code"] != "not_found" || it["version"] != nil || it["display"] != nil {
			t.Errorf("absent item: %v", it)
		}
	}
	if got[5]["item_id"] != ids[0] || got[5]["status"] != 200.0 || got[5]["version"] != 1.0 {
		t.Errorf("repeated id: %v", got[5])
	}

	// The same items as single GETs, then the batch, warm: each item
	// answered as its own GET is.
	for _, id := range ids {
		e.do("GET", in.item(url.PathEscape(id)), key, "") // fill the rest
	}
	single := e.do("GET", in.item(url.PathEscape(ids[1])), key, "")
	got = items(e.do("GET", batchURL(ids[1], "none"), key, ""))
	if single.cacheStatus() != "tidemark; hit" || got[0]["cache_status"] != "tidemark; hit; ttl="+ttlOf(t, got[0]) ||
		got[0]["etag"] != single.header.Get("ETag") || got[0]["version"] != float64(single.version()) {
		t.Errorf("warm: single GET %d %q ETag %q, batch %v", single.code, single.header.Get("Cache-Status"), single.header.Get("ETag"), got[0])
	}
	if got[1]["cache_status"] != "tidemark; hit; detail=not-found" {
		t.Errorf("cached absence: %v", got[1])
	}

	// A committed change applied (INVALIDATE of v2): the batch reads the
	// source for that item under its lease, as its GET would, and never
	// answers the invalidated v1 while the source answers; the others stay
	// hits.
	ccfg := testCacheConfig()
	longSoft(&ccfg)
	applier := e.newCache(ccfg)
	e.exec(`UPDATE catalog.items SET version = 2, display = '{"n":"two"}' WHERE tenant_id = 'acme' AND item_id = $1`, ids[2])
	if _, err := applier.Invalidate(testenv.Context(t, 10*time.Second), "acme", ids[2], 2); err != nil {
		t.Fatal(err)
	}
	got = items(e.do("GET", batchURL(ids[1], ids[2]), key, ""))
	if got[1]["item_id"] != ids[2] || got[1]["status"] != 200.0 || got[1]["version"] != 2.0 ||
		got[1]["cache_status"] != "tidemark; fwd=miss; stored; detail=invalidated; ttl="+ttlOf(t, got[1]) ||
		got[1]["etag"] != fmt.Sprintf(`"2.%s"`, tenantTag("acme")) || got[1]["display"].(map[string]any)["n"] != "two" {
		t.Errorf("invalidated item: %v", got[1])
	}
	if got[0]["cache_status"] != "tidemark; hit; ttl="+ttlOf(t, got[0]) || got[0]["version"] != 1.0 {
		t.Errorf("item beside the invalidated one: %v", got[0])
	}
	if single := e.do("GET", in.item(url.PathEscape(ids[2])), key, ""); single.version() != 2 || single.cacheStatus() != "tidemark; hit" {
		t.Errorf("GET after the batch refilled the invalidated item: %d %q %s", single.code, single.header.Get("Cache-Status"), single.raw)
	}

	// One round trip for the lookups: Redis read events per request.
	rdb, err := cache.ParseRedisURL(e.redis.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	reads := func() int64 {
		info, err := rdb.Info(context.Background(), "stats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "total_reads_processed:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		t.Fatal("no total_reads_processed in INFO stats")
		return 0
	}
	const rounds = 5
	before := reads()
	for range rounds {
		for _, it := range items(e.do("GET", batchURL(ids...), key, "")) {
			if it["cache_status"] != "tidemark; hit; ttl="+ttlOf(t, it) {
				t.Fatalf("warm batch item: %v", it)
			}
		}
	}
	batchReads := reads() - before - 1 // the INFO itself
	before = reads()
	for range rounds {
		for _, id := range ids {
			if r := e.do("GET", in.item(url.PathEscape(id)), key, ""); r.cacheStatus() != "tidemark; hit" {
				t.Fatalf("single GET %s: %d %q", id, r.code, r.header.Get("Cache-Status"))
			}
		}
	}
	singleReads := reads() - before - 1
	t.Logf("Redis read events: %d for %d batches of %d items, %d for the same %d single GETs", batchReads, rounds, n, singleReads, rounds*n)
	if batchReads > rounds*n/4 || singleReads < rounds*n {
		t.Fatalf("Redis read events: %d for %d batch reads of %d items (want at most %d: one round trip each, and the background pollers), %d for %d single GETs",
			batchReads, rounds, n, rounds*n/4, singleReads, rounds*n)
	}

	// Bad requests.
	for _, q := range []string{"", "?ids=a,b", "?id=a&limit=2", "?id=" + strings.Repeat("x", 300), "?" + strings.Repeat("id=a&", 101)} {
		if r := e.do("GET", in.url+"/v1/catalog/items:batchGet"+q, key, ""); r.code != 400 {
			t.Errorf("batch %q: %d %s", q, r.code, r.raw)
		}
	}
}

// ttlOf is the ttl an item's Cache-Status carries (its own GET's header).
func ttlOf(t *testing.T, it map[string]any) string {
	t.Helper()
	cs, _ := it["cache_status"].(string)
	_, ttl, ok := strings.Cut(cs, "; ttl=")
	if !ok {
		return "(none)"
	}
	return ttl
}
