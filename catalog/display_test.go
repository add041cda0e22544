package catalog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A display expression may read the item's own row, through built-in and
// IMMUTABLE functions; one that reads another table or view, calls a
// volatile function or a function of the database's own that is not
// IMMUTABLE is refused, naming what it reads: capture sees only the
// table's changes.
func TestCheckDisplayRefusesWhatCaptureCannotSee(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	ctx := testenv.Context(t, time.Minute)
	conn, err := pgx.Connect(ctx, pg.MigratedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, q := range []string{
		`CREATE SCHEMA shop`,
		`CREATE TABLE shop.prices (tenant_id text, item_id text, price numeric)`,
		`CREATE FUNCTION shop.label(d jsonb) RETURNS jsonb IMMUTABLE LANGUAGE sql AS $$ SELECT jsonb_build_object('label', d) $$`,
		`CREATE FUNCTION shop.price_of(i text) RETURNS numeric STABLE LANGUAGE sql AS $$ SELECT price FROM shop.prices WHERE item_id = i $$`,
		`CREATE SEQUENCE shop.n`,
		`CREATE FUNCTION shop.counter() RETURNS bigint VOLATILE LANGUAGE sql AS $$ SELECT nextval('shop.n') $$`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		sql  string
		want string // "" when allowed; else what the error names
	}{
		{"", ""}, // the columns
		{"jsonb_build_object('d', display, 'v', version, 'at', to_char(updated_at, 'YYYY'))", ""},
		{"shop.label(display)", ""},
		{"jsonb_build_object('d', display, 'price', (SELECT p.price FROM shop.prices p WHERE p.item_id = items.item_id))", "shop.prices"},
		{"jsonb_build_object('d', display, 'price', shop.price_of(item_id))", "shop.price_of(text)"},
		{"jsonb_build_object('d', display, 'n', shop.counter())", "shop.counter() (volatile"},
		{"jsonb_build_object('d', display, 'a', (SELECT count(*) FROM information_schema.tables))", "information_schema.tables"},
	}
	for _, c := range cases {
		tb := catalog.DefaultTable()
		tb.PayloadSQL = c.sql
		err := tb.CheckDisplay(ctx, conn)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v, want allowed", c.sql, err)
		case c.want != "" && (!errors.Is(err, catalog.ErrDisplayReadsElsewhere) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v, want ErrDisplayReadsElsewhere naming %s", c.sql, err, c.want)
		}
	}

	// Nothing stays behind: the view was rolled back.
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_class WHERE relname = 'tidemark_display_check'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("tidemark_display_check left behind: %d (%v)", n, err)
	}
}
