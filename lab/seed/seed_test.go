package seed_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"tidemark/lab/seed"
	"tidemark/lab/testenv"
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
}
