package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/migrations"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestUpIsIdempotent(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn := pg.DSN(pg.NewDatabase(t))
	ctx := testenv.Context(t, time.Minute)
	log := testenv.Logger(t)

	first, err := migrations.Up(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Applied) == 0 || first.Current != first.Applied[len(first.Applied)-1] {
		t.Fatalf("first run applied %v, current %d", first.Applied, first.Current)
	}
	second, err := migrations.Up(ctx, dsn, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Applied) != 0 || second.Current != first.Current {
		t.Fatalf("second run applied %v (want none), current %d", second.Applied, second.Current)
	}
	applied, pending, err := migrations.Status(ctx, dsn)
	if err != nil || len(pending) != 0 || len(applied) != len(first.Applied) {
		t.Fatalf("status: applied %v pending %v err %v", applied, pending, err)
	}
}

func TestPublicationLeavesDisplayOut(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	if _, err := migrations.Up(context.Background(), pg.DSN(db), testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	conn := pg.Connect(t, db)
	var cols []string
	err := conn.QueryRow(context.Background(),
		`SELECT attnames FROM pg_publication_tables WHERE pubname = 'tidemark' AND schemaname = 'catalog' AND tablename = 'items'`).Scan(&cols)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(cols, ",")
	if strings.Contains(got, "display") || !strings.Contains(got, "version") || !strings.Contains(got, "tenant_id") {
		t.Fatalf("publication columns = %s", got)
	}
}

func TestPartialStateIsReported(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	pg.Exec(t, db, "CREATE SCHEMA catalog")
	_, err := migrations.Up(context.Background(), pg.DSN(db), testenv.Logger(t))
	if err == nil || !strings.Contains(err.Error(), "partially set up") {
		t.Fatalf("Up on a hand-made schema: %v, want a partial-state error", err)
	}
}

// A database migrated when goose's table was public.tidemark_schema_migrations
// keeps its recorded versions: Status reads the old table, Up moves it into
// schema tidemark and applies nothing.
func TestLegacyVersionTableIsMoved(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	dsn := pg.DSN(db)
	ctx := testenv.Context(t, time.Minute)
	first, err := migrations.Up(ctx, dsn, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, db, `ALTER TABLE tidemark.schema_migrations RENAME TO tidemark_schema_migrations;
		ALTER TABLE tidemark.tidemark_schema_migrations SET SCHEMA public`)
	applied, pending, err := migrations.Status(ctx, dsn)
	if err != nil || len(pending) != 0 || len(applied) != len(first.Applied) {
		t.Fatalf("status on the legacy table: applied %v pending %v err %v", applied, pending, err)
	}
	again, err := migrations.Up(ctx, dsn, testenv.Logger(t))
	if err != nil || len(again.Applied) != 0 || again.Current != first.Current {
		t.Fatalf("up on the legacy table: applied %v (want none), current %d, err %v", again.Applied, again.Current, err)
	}
	var moved bool
	if err := pg.Connect(t, db).QueryRow(ctx, `SELECT to_regclass('tidemark.schema_migrations') IS NOT NULL AND to_regclass('public.tidemark_schema_migrations') IS NULL`).Scan(&moved); err != nil || !moved {
		t.Fatalf("version table not moved to %s: %v %v", migrations.VersionTable, moved, err)
	}
}

// An UPDATE that leaves version as it was (a display fixed by hand) still
// raises it, so the pipeline invalidates the cached copy; an UPDATE that
// raises it keeps its own value.
func TestEveryUpdateRaisesVersion(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	if _, err := migrations.Up(context.Background(), pg.DSN(db), testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	conn := pg.Connect(t, db)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('t', 'i', 4, '"a"')`); err != nil {
		t.Fatal(err)
	}
	var v int64
	if err := conn.QueryRow(ctx, `UPDATE catalog.items SET display = '"b"' WHERE tenant_id = 't' AND item_id = 'i' RETURNING version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 5 {
		t.Fatalf("display-only UPDATE left version %d, want 5: the cached copy would never be invalidated", v)
	}
	if err := conn.QueryRow(ctx, `UPDATE catalog.items SET version = 9, display = '"c"' WHERE tenant_id = 't' AND item_id = 'i' RETURNING version`).Scan(&v); err != nil || v != 9 {
		t.Fatalf("UPDATE raising version to 9: version %d, err %v", v, err)
	}
}

// TestOwnTablesMatchMigrations: tidemark adopt creates tidemark's own tables
// with OwnTablesSQL instead of the numbered migrations; both must end at the
// same shape (columns, types, defaults, indexes).
func TestOwnTablesMatchMigrations(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	ctx := testenv.Context(t, time.Minute)
	migrated := pg.NewDatabase(t)
	if _, err := migrations.Up(ctx, pg.DSN(migrated), testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	adopted := pg.NewDatabase(t)
	if err := migrations.EnsureOwnTables(ctx, pg.Connect(t, adopted)); err != nil {
		t.Fatal(err)
	}
	shape := func(db string) string {
		var s string
		err := pg.Connect(t, db).QueryRow(ctx, `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
			SELECT c.table_name || '.' || c.column_name || ' ' || c.data_type || ' ' || c.is_nullable || ' ' || coalesce(c.column_default, '') AS x
			  FROM information_schema.columns c WHERE c.table_schema = 'tidemark' AND c.table_name <> $1
			UNION ALL
			SELECT indexname || ' ' || replace(indexdef, indexname, '') FROM pg_indexes WHERE schemaname = 'tidemark' AND tablename <> $1) s`,
			strings.TrimPrefix(migrations.VersionTable, migrations.VersionSchema+".")).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	m, a := shape(migrated), shape(adopted)
	if m != a || !strings.Contains(m, "api_keys.key_sha256") {
		t.Fatalf("tidemark schema differs:\nmigrations:\n%s\n\nOwnTablesSQL:\n%s", m, a)
	}
}

// Check tells a database without tidemark's schema, or with an older one,
// from a migrated or adopted one: what keeps a process not ready.
func TestCheckSaysWhetherTheSchemaIsCurrent(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	ctx := testenv.Context(t, time.Minute)
	db := pg.NewDatabase(t)
	conn := pg.Connect(t, db)
	behind := func(step, want string) {
		t.Helper()
		err := migrations.Check(ctx, conn)
		if !errors.Is(err, migrations.ErrSchemaBehind) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: Check = %v, want ErrSchemaBehind saying %q", step, err, want)
		}
	}
	behind("unmigrated", "not migrated")
	if _, err := migrations.Up(ctx, pg.DSN(db), testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, conn); err != nil {
		t.Fatalf("migrated: Check = %v", err)
	}
	latest := migrations.Latest()
	pg.Exec(t, db, `DELETE FROM `+migrations.VersionTable+` WHERE version_id = $1`, latest)
	behind("one migration behind", fmt.Sprintf("at version %d, this binary needs %d", latest-1, latest))

	adopted := pg.Connect(t, pg.NewDatabase(t))
	if err := migrations.EnsureOwnTables(ctx, adopted); err != nil {
		t.Fatal(err)
	}
	if err := migrations.Check(ctx, adopted); err != nil {
		t.Fatalf("adopted: Check = %v", err)
	}
}

// An upgrade to the schema with tidemark.source_readers (migrate, or adopt
// again) grants it to the role that writes the rollout settings, the serve
// processes' by docs/postgres.md, and tidemark.capture_slots to the role
// that updates the heartbeat row, capture's: a process of the new release
// is not held out of service by a grant no one ran.
func TestNewTablesGrantedToTheirRoles(t *testing.T) {
	for _, tc := range []struct {
		table, privileges string
		version           int64  // the migration that creates it
		role, grant       string // the role's grant before it, by docs/postgres.md
	}{
		{"tidemark.source_readers", "SELECT, INSERT, UPDATE, DELETE", 6, "serve", "GRANT SELECT, INSERT, UPDATE ON tidemark.rollout_settings TO "},
		{"tidemark.capture_slots", "SELECT, INSERT, UPDATE", 7, "capture", "GRANT UPDATE ON tidemark.heartbeat TO "},
	} {
		t.Run(tc.table, func(t *testing.T) {
			pg := testenv.SharedPostgres(t)
			ctx := testenv.Context(t, time.Minute)
			db := pg.NewDatabase(t)
			if _, err := migrations.Up(ctx, pg.DSN(db), testenv.Logger(t)); err != nil {
				t.Fatal(err)
			}
			role := strings.ReplaceAll(testenv.Unique(t, tc.role), "-", "_")
			pg.Exec(t, db, `CREATE ROLE `+role+` LOGIN`)
			pg.Exec(t, db, `GRANT USAGE ON SCHEMA tidemark TO `+role)
			pg.Exec(t, db, tc.grant+role)
			granted := func(step string) {
				t.Helper()
				var ok bool
				if err := pg.Connect(t, db).QueryRow(ctx, `SELECT has_table_privilege($1, $2, $3)`, role, tc.table, tc.privileges).Scan(&ok); err != nil {
					t.Fatal(err)
				}
				if !ok {
					t.Fatalf("%s: the %s role %s lacks %s on %s", step, tc.role, role, tc.privileges, tc.table)
				}
			}
			before := func() { // the database as the release before the table left it
				pg.Exec(t, db, `DROP TABLE `+tc.table)
				pg.Exec(t, db, `DELETE FROM `+migrations.VersionTable+` WHERE version_id >= $1`, tc.version)
				if tc.version < migrations.Latest() { // the later migrations' tables, which Up creates again
					pg.Exec(t, db, `DROP TABLE IF EXISTS tidemark.capture_slots`)
				}
			}
			before()
			if _, err := migrations.Up(ctx, pg.DSN(db), testenv.Logger(t)); err != nil {
				t.Fatal(err)
			}
			granted("migrate")
			before()
			if err := migrations.EnsureOwnTables(ctx, pg.Connect(t, db)); err != nil {
				t.Fatal(err)
			}
			granted("adopt")
		})
	}
}
