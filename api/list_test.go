package api

import (
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/testenv"
)

// TestListPagesByUpdatedAtAndIsTenantScoped: the management list pages
// through one tenant's items in (updated_at, item_id) order, never shows
// another tenant's, and sees a write at once (it reads the source).
func TestListPagesByUpdatedAtAndIsTenantScoped(t *testing.T) {
	e := newEnv(t)
	in := e.instance(instOpts{})
	// 25 items of t1 sharing 5 timestamps (ties are ordered by item_id),
	// and t2's items interleaved at the same times.
	for i := 0; i < 25; i++ {
		e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display, updated_at)
			VALUES ('t1', $1, 1, '{"n":1}', '2026-01-01T00:00:00Z'::timestamptz + make_interval(secs => $2)),
			       ('t2', $1, 1, '{"n":2}', '2026-01-01T00:00:00Z'::timestamptz + make_interval(secs => $2))`,
			fmt.Sprintf("item-%02d", 24-i), i%5)
	}
	k1 := e.apiKey("t1")
	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatalf("more than 10 pages of 10 for 25 items: %v", seen)
		}
		q := url.Values{"limit": {"10"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		r := e.do("GET", in.url+"/v1/catalog/items?"+q.Encode(), k1, "")
		if r.code != 200 {
			t.Fatalf("page %d: %d %s", page, r.code, r.raw)
		}
		items := r.body["items"].([]any)
		for _, it := range items {
			m := it.(map[string]any)
			if d := m["display"].(map[string]any); d["n"] != float64(1) {
				t.Fatalf("t1's list holds another tenant's row: %v", m)
			}
			seen = append(seen, m["updated_at"].(string)+" "+m["item_id"].(string))
		}
		next, _ := r.body["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != 25 {
		t.Fatalf("listed %d items, want 25: %v", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i-1] >= seen[i] {
			t.Fatalf("not in (updated_at, item_id) order at %d: %q then %q", i, seen[i-1], seen[i])
		}
	}
	// updated_after is inclusive, and a write is listed at once.
	e.exec(`UPDATE catalog.items SET version = 2, display = '{"n":1,"new":true}', updated_at = '2030-01-01T00:00:00Z' WHERE tenant_id = 't1' AND item_id = 'item-00'`)
	r := e.do("GET", in.url+"/v1/catalog/items?updated_after=2030-01-01T00:00:00Z", k1, "")
	items, _ := r.body["items"].([]any)
	if r.code != 200 || len(items) != 1 || !strings.Contains(r.raw, `"version":2`) {
		t.Fatalf("updated_after: %d %s, want item-00 at version 2 alone", r.code, r.raw)
	}
	if r := e.do("GET", in.url+"/v1/catalog/items?cursor=nonsense!", k1, ""); r.code != 400 {
		t.Fatalf("a bad cursor: %d %s, want 400", r.code, r.raw)
	}
	if r := e.do("GET", in.url+"/v1/catalog/items?limit=0", k1, ""); r.code != 400 {
		t.Fatalf("limit=0: %d %s, want 400", r.code, r.raw)
	}
}

// TestServeForeignTable: serve reads a table of the operator's own shape
// through catalog.Table (display built from three columns), lists it, and
// refuses writes it cannot make.
func TestServeForeignTable(t *testing.T) {
	e := newEnv(t)
	e.exec(`CREATE SCHEMA shop; CREATE TABLE shop.products (shop_id text NOT NULL, sku text NOT NULL, rev bigint NOT NULL,
		title text, image_url text, body text, status text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (shop_id, sku))`)
	e.exec(`INSERT INTO shop.products VALUES ('s1', 'p1', 3, 'Lamp', 'https://img/1', 'bright', 'live'), ('s1', 'p2', 4, 'Old', '', '', 'gone')`)
	tbl := catalog.Table{Name: "shop.products", TenantColumn: "shop_id", ItemColumn: "sku", VersionColumn: "rev",
		StateColumn: "status", DeletedState: "gone", ActiveState: "live", UpdatedAtColumn: "updated_at",
		Payload: []string{"title", "image_url", "body"}}
	in := e.instance(instOpts{cfg: func(c *Config) { c.Table = tbl }})
	k := e.apiKey("s1")
	r := e.do("GET", in.url+"/v1/catalog/items/p1", k, "")
	d, _ := r.body["display"].(map[string]any)
	if r.code != 200 || r.version() != 3 || d["title"] != "Lamp" || d["image_url"] != "https://img/1" || d["body"] != "bright" {
		t.Fatalf("GET p1: %d %s, want version 3 with title, image_url and body", r.code, r.raw)
	}
	if r := e.do("GET", in.url+"/v1/catalog/items/p2", k, ""); r.code != 404 {
		t.Fatalf("GET of a tombstone: %d %s, want 404", r.code, r.raw)
	}
	if r := e.do("GET", in.url+"/v1/catalog/items", k, ""); r.code != 200 || !strings.Contains(r.raw, `"Lamp"`) {
		t.Fatalf("list: %d %s", r.code, r.raw)
	}
	r = e.do("POST", in.url+"/v1/catalog/items", k, `{"item_id":"p3","display":{"title":"x"}}`)
	if r.code != 405 || r.header.Get("Allow") != "GET" {
		t.Fatalf("POST to a multi-column table: %d %s, want 405 with Allow: GET", r.code, r.raw)
	}
	testenv.Logger(t).Info("foreign table served", "display", d)
}
