package adopt_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/adopt"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// shopSchema is a catalog the way a shop might already have it: a surrogate
// primary key, the (shop, sku) pair unique, a revision counter, the payload
// in three columns, a status column.
const shopSchema = `
CREATE SCHEMA shop;
CREATE TABLE shop.products (
    id         bigserial   PRIMARY KEY,
    shop_id    text        NOT NULL,
    sku        text        NOT NULL,
    rev        bigint      NOT NULL DEFAULT 1,
    title      text,
    image_url  text,
    body       text,
    status     text        NOT NULL DEFAULT 'live',
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (shop_id, sku)
);`

// ShopTable maps shop.products.
func shopTable() catalog.Table {
	return catalog.Table{Name: "shop.products", TenantColumn: "shop_id", ItemColumn: "sku", VersionColumn: "rev",
		StateColumn: "status", DeletedState: "gone", ActiveState: "live", UpdatedAtColumn: "updated_at",
		Payload: []string{"title", "image_url", "body"}}
}

func TestAdoptForeignTable(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	pg.Exec(t, db, shopSchema)
	pg.Exec(t, db, `INSERT INTO shop.products (shop_id, sku, title) VALUES ('s1', 'a', 'A'), ('s1', 'b', 'B')`)
	ctx := testenv.Context(t, time.Minute)
	log := testenv.Logger(t)
	cfg := adopt.DefaultConfig()
	cfg.PG, cfg.Table = pg.DSN(db), shopTable()

	// A dry run plans every change and makes none.
	dry := cfg
	dry.DryRun = true
	rep, err := adopt.Run(ctx, dry, log)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	planned := 0
	for _, s := range rep.Steps {
		if s.SQL != "" {
			planned++
		}
	}
	if planned < 4 {
		t.Fatalf("dry run planned %d changes, want replica identity, own tables, publication, trigger: %+v", planned, rep.Steps)
	}
	conn := pg.Connect(t, db)
	var pubs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication`).Scan(&pubs); err != nil || pubs != 0 {
		t.Fatalf("dry run created %d publications (err %v), want none", pubs, err)
	}

	if _, err := adopt.Run(ctx, cfg, log); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	// The publication carries key, version and state, never the payload,
	// and the heartbeat row.
	var cols []string
	if err := conn.QueryRow(ctx, `SELECT attnames::text[] FROM pg_publication_tables WHERE pubname = 'tidemark' AND schemaname = 'shop' AND tablename = 'products'`).Scan(&cols); err != nil {
		t.Fatalf("publication: %v", err)
	}
	slices.Sort(cols)
	if got := strings.Join(cols, ","); got != "rev,shop_id,sku,status" {
		t.Fatalf("published columns = %s, want rev,shop_id,sku,status", got)
	}
	var hb int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication_tables WHERE pubname = 'tidemark' AND schemaname = 'tidemark' AND tablename = 'heartbeat'`).Scan(&hb); err != nil {
		t.Fatal(err)
	}
	if hb != 1 {
		t.Fatal("the heartbeat row is not published")
	}
	// The replica identity is the (shop_id, sku) key, so an UPDATE passes
	// the publication's column-list check (Postgres refuses it otherwise).
	var ident string
	if err := conn.QueryRow(ctx, `SELECT relreplident::text FROM pg_class WHERE oid = 'shop.products'::regclass`).Scan(&ident); err != nil {
		t.Fatal(err)
	}
	if ident != "i" {
		t.Fatalf("replica identity %q, want i (the unique key)", ident)
	}

	// A raw UPDATE of the payload without a version bump gets one.
	pg.Exec(t, db, `UPDATE shop.products SET title = 'A2' WHERE shop_id = 's1' AND sku = 'a'`)
	if v := rev(t, conn, "a"); v != 2 {
		t.Fatalf("rev after a title-only UPDATE = %d, want 2 (the trigger bumps it)", v)
	}
	// A writer that bumps the version itself is left alone.
	pg.Exec(t, db, `UPDATE shop.products SET title = 'A3', rev = 7 WHERE shop_id = 's1' AND sku = 'a'`)
	if v := rev(t, conn, "a"); v != 7 {
		t.Fatalf("rev after an UPDATE that sets rev 7 = %d, want 7", v)
	}
	// A version never goes back: a lower one becomes the next one.
	pg.Exec(t, db, `UPDATE shop.products SET rev = 3 WHERE shop_id = 's1' AND sku = 'a'`)
	if v := rev(t, conn, "a"); v != 8 {
		t.Fatalf("rev after an UPDATE that lowers it to 3 = %d, want 8", v)
	}
	// An UPDATE that changes nothing the cache holds keeps the version.
	pg.Exec(t, db, `UPDATE shop.products SET updated_at = now() WHERE shop_id = 's1' AND sku = 'a'`)
	if v := rev(t, conn, "a"); v != 8 {
		t.Fatalf("rev after an updated_at-only UPDATE = %d, want 8", v)
	}
	// A DELETE becomes a tombstone with the next version.
	pg.Exec(t, db, `DELETE FROM shop.products WHERE shop_id = 's1' AND sku = 'b'`)
	var status string
	var v int64
	if err := conn.QueryRow(ctx, `SELECT status, rev FROM shop.products WHERE shop_id = 's1' AND sku = 'b'`).Scan(&status, &v); err != nil {
		t.Fatalf("the deleted row is gone (%v); want a tombstone", err)
	}
	if status != "gone" || v != 2 {
		t.Fatalf("tombstone = (%s, %d), want (gone, 2)", status, v)
	}
	// tidemark's own tables are in their own schema.
	var own int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'tidemark' AND tablename IN ('api_keys', 'requests', 'heartbeat')`).Scan(&own); err != nil {
		t.Fatal(err)
	}
	if own != 3 {
		t.Fatalf("%d of tidemark's 3 own tables exist", own)
	}

	// Adoption is idempotent: a second run changes nothing.
	rep, err = adopt.Run(ctx, cfg, log)
	if err != nil {
		t.Fatalf("second adopt: %v", err)
	}
	for _, s := range rep.Steps {
		if s.SQL != "" && !strings.Contains(s.What, "own tables") && !strings.Contains(s.What, "version trigger") {
			t.Errorf("second run changed something: %s\n%s", s.What, s.SQL)
		}
	}
}

func TestAdoptRefusesDeletes(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	pg.Exec(t, db, shopSchema)
	pg.Exec(t, db, `INSERT INTO shop.products (shop_id, sku, title) VALUES ('s1', 'a', 'A')`)
	cfg := adopt.DefaultConfig()
	cfg.PG, cfg.Table, cfg.Deletes = pg.DSN(db), shopTable(), adopt.DeletesRefuse
	ctx := testenv.Context(t, time.Minute)
	if _, err := adopt.Run(ctx, cfg, testenv.Logger(t)); err != nil {
		t.Fatalf("adopt: %v", err)
	}
	conn := pg.Connect(t, db)
	_, err := conn.Exec(ctx, `DELETE FROM shop.products WHERE sku = 'a'`)
	if err == nil || !strings.Contains(err.Error(), "never deleted") {
		t.Fatalf("DELETE = %v, want the trigger's refusal", err)
	}
}

// A table without a unique (tenant, item) key is reported with the SQL to
// run, and nothing else is changed.
func TestAdoptReportsMissingKey(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	pg.Exec(t, db, `CREATE SCHEMA shop; CREATE TABLE shop.products (id bigserial PRIMARY KEY, shop_id text NOT NULL, sku text NOT NULL,
		rev bigint NOT NULL, title text, image_url text, body text, status text NOT NULL, updated_at timestamptz NOT NULL)`)
	cfg := adopt.DefaultConfig()
	cfg.PG, cfg.Table = pg.DSN(db), shopTable()
	rep, err := adopt.Run(testenv.Context(t, time.Minute), cfg, testenv.Logger(t))
	if !errors.Is(err, adopt.ErrNotAdoptable) {
		t.Fatalf("adopt = %v, want ErrNotAdoptable", err)
	}
	m := rep.Manual()
	if len(m) != 1 || !strings.Contains(m[0].SQL, "CREATE UNIQUE INDEX") {
		t.Fatalf("manual steps = %+v, want the unique index to create", m)
	}
}

func rev(t *testing.T, conn *pgx.Conn, sku string) int64 {
	t.Helper()
	var v int64
	if err := conn.QueryRow(context.Background(), `SELECT rev FROM shop.products WHERE shop_id = 's1' AND sku = $1`, sku).Scan(&v); err != nil {
		t.Fatalf("read rev of %s: %v", sku, err)
	}
	return v
}

// A display expression that reads another table is refused before
// anything is changed: its changes would never invalidate.
func TestAdoptRefusesDisplayReadingAnotherTable(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	pg.Exec(t, db, shopSchema)
	pg.Exec(t, db, `CREATE TABLE shop.stock (sku text PRIMARY KEY, units int)`)
	cfg := adopt.DefaultConfig()
	cfg.PG, cfg.Table = pg.DSN(db), shopTable()
	cfg.Table.PayloadSQL = "jsonb_build_object('title', title, 'units', (SELECT s.units FROM shop.stock s WHERE s.sku = products.sku))"
	_, err := adopt.Run(testenv.Context(t, time.Minute), cfg, testenv.Logger(t))
	if !errors.Is(err, adopt.ErrNotAdoptable) || !errors.Is(err, catalog.ErrDisplayReadsElsewhere) || !strings.Contains(err.Error(), "shop.stock") {
		t.Fatalf("adopt = %v, want ErrNotAdoptable: the display reads shop.stock", err)
	}
	var published bool
	if err := pg.Connect(t, db).QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE tablename = 'products')`).Scan(&published); err != nil || published {
		t.Fatalf("the table was published (%v, %v): adopt changed something before refusing", published, err)
	}
}
