package seed_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/seed"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestItemsInsert(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.SharedPostgres(t).MigratedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	s := seed.Items{Tenant: "t1", Prefix: "item-", Pad: 5, First: 1, Count: 25, Batch: 10,
		Display: "jsonb_build_object('tenant', t, 'item', id, 'n', n)", State: "active"}
	if err := s.Insert(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var n int
	var first, last, display string
	if err := conn.QueryRow(ctx, `SELECT count(*), min(item_id), max(item_id), (SELECT display::text FROM catalog.items WHERE item_id = 'item-00007')
		FROM catalog.items WHERE tenant_id = 't1' AND version = 1 AND state = 'active'`).Scan(&n, &first, &last, &display); err != nil {
		t.Fatal(err)
	}
	if n != 25 || first != "item-00001" || last != "item-00025" || !strings.Contains(display, `"n": 7`) || !strings.Contains(display, `"item": "item-00007"`) {
		t.Fatalf("seeded %d rows %s..%s, display %s; want 25 rows item-00001..item-00025 with their own display", n, first, last, display)
	}
	if err := s.Insert(ctx, conn); err == nil {
		t.Fatal("seeding existing rows again succeeded without SkipExisting")
	}
	s.SkipExisting, s.Count = true, 30
	if err := s.Insert(ctx, conn); err != nil {
		t.Fatalf("SkipExisting: %v", err)
	}
	// Raise: present active rows one version up, the display at the new
	// version; RaiseExisting: insert or raise, made active.
	r := seed.Items{Tenant: "t1", Prefix: "item-", Pad: 5, First: 7, Count: 2, Display: "jsonb_build_object('item', id, 'v', v, 'n', n)"}
	if n, err := r.Raise(ctx, conn); err != nil || n != 2 {
		t.Fatalf("Raise: %d rows, %v; want 2", n, err)
	}
	if _, err := conn.Exec(ctx, `UPDATE catalog.items SET state = 'deleted' WHERE tenant_id = 't1' AND item_id = 'item-00008'`); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Raise(ctx, conn); err != nil || n != 1 {
		t.Fatalf("Raise with one row deleted: %d rows, %v; want 1 (a deleted row is left alone)", n, err)
	}
	r.RaiseExisting, r.Count = true, 30 // 7..36: 7..30 present, 31..36 new
	if err := r.Insert(ctx, conn); err != nil {
		t.Fatalf("RaiseExisting: %v", err)
	}
	got := map[string]string{}
	rows, err := conn.Query(ctx, `SELECT item_id, version || ' ' || state || ' ' || coalesce(display::text, '') FROM catalog.items
		WHERE tenant_id = 't1' AND item_id IN ('item-00007', 'item-00008', 'item-00036')`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, row string
		if err := rows.Scan(&id, &row); err != nil {
			t.Fatal(err)
		}
		got[id] = row
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"item-00007": `4 active {"n": null, "v": 4, "item": "item-00007"}`,
		"item-00008": `4 active {"n": null, "v": 4, "item": "item-00008"}`, // the deleting UPDATE raised it too (the version trigger)
		"item-00036": `1 active {"n": 36, "v": 1, "item": "item-00036"}`,
	} {
		if got[id] != want {
			t.Errorf("%s after Raise, Raise and RaiseExisting: %q, want %q", id, got[id], want)
		}
	}
	// No display or state: the table's defaults; no padding.
	if err := (seed.Items{Tenant: "t2", Prefix: "i", Count: 3}).Insert(ctx, conn); err != nil {
		t.Fatal(err)
	}
	var ids string
	if err := conn.QueryRow(ctx, `SELECT string_agg(item_id, ',' ORDER BY item_id) FROM catalog.items WHERE tenant_id = 't2'`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if ids != "i0,i1,i2" {
		t.Fatalf("ids %q, want i0,i1,i2", ids)
	}
	// An operator's own table, by its mapping: display into its payload
	// column, state into its state column.
	if _, err := conn.Exec(ctx, `CREATE SCHEMA shop; CREATE TABLE shop.products (shop_id text, sku text, rev bigint, status text, body jsonb,
		PRIMARY KEY (shop_id, sku))`); err != nil {
		t.Fatal(err)
	}
	shop := catalog.Table{Name: "shop.products", TenantColumn: "shop_id", ItemColumn: "sku", VersionColumn: "rev",
		StateColumn: "status", DeletedState: "gone", ActiveState: "live", Payload: []string{"body"}}
	if err := (seed.Items{Table: shop, Tenant: "s1", Prefix: "sku-", Count: 4, Display: "jsonb_build_object('n', n)", State: "live"}).Insert(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*), max(body::text) FROM shop.products WHERE shop_id = 's1' AND rev = 1 AND status = 'live'`).Scan(&n, &display); err != nil {
		t.Fatal(err)
	}
	if n != 4 || display != `{"n": 3}` {
		t.Fatalf("shop.products: %d rows, largest body %s; want 4 live rows at rev 1 with their own body", n, display)
	}
	// Raise by the mapping: rev and body, only live rows.
	if _, err := conn.Exec(ctx, `UPDATE shop.products SET status = 'gone' WHERE sku = 'sku-0'`); err != nil {
		t.Fatal(err)
	}
	if n, err := (seed.Items{Table: shop, Tenant: "s1", Prefix: "sku-", Count: 4, Display: "jsonb_build_object('v', v)"}).Raise(ctx, conn); err != nil || n != 3 {
		t.Fatalf("Raise on shop.products: %d rows, %v; want the 3 live ones", n, err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*), max(body::text) FROM shop.products WHERE shop_id = 's1' AND rev = 2 AND status = 'live'`).Scan(&n, &display); err != nil {
		t.Fatal(err)
	}
	if n != 3 || display != `{"v": 2}` {
		t.Fatalf("shop.products raised: %d live rows at rev 2, largest body %s; want 3 with body {\"v\": 2}", n, display)
	}
}
