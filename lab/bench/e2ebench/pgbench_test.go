package e2ebench

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/lab/testenv"
)

// pgbench runs the load at its rate, and what it changed is read back from
// Postgres: every committed transaction changed its rows once (no row twice,
// the rows taken in sequence), and the timed rows' changes are counted
// exactly.
func TestPgbenchLoadCountsWhatItChanged(t *testing.T) {
	bin := findPgbench("/usr/lib/postgresql/15/bin/pg_recvlogical")
	if bin == "" {
		t.Fatal("pgbench not found beside pg_recvlogical or on PATH (it comes with postgresql-client)")
	}
	dsn := testenv.SharedPostgres(t).MigratedDatabase(t)
	ctx := testenv.Context(t, 60*time.Second)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// keys exceeds the most rows the check allows (60 commits × 20), so no
	// row is changed twice by the load wrapping around.
	const keys, rows = 2000, 20
	if err := seedTenant(ctx, pool, "pgb", keys); err != nil {
		t.Fatal(err)
	}
	l := &load{pool: pool, tenant: "pgb", keys: keys, rows: rows, txRate: 20, workers: 2, every: 10, pgbench: bin, dsn: dsn}
	res, err := l.run(ctx, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if res.Commits < 20 || res.Commits > 60 || res.Changes != rows*res.Commits || res.CPU <= 0 {
		t.Fatalf("pgbench at 20 tx/s for 2 s: %+v, want about 40 commits of %d rows each and its CPU", res, rows)
	}
	// Rows 0 .. commits*rows-1 changed once each; every tenth is timed.
	if want := (res.Changes + 9) / 10; res.Observed != want {
		t.Errorf("timed changes %d, want %d (every tenth of %d changed rows)", res.Observed, want, res.Changes)
	}
	var twice int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM catalog.items WHERE tenant_id = 'pgb' AND version > 2`).Scan(&twice); err != nil || twice != 0 {
		t.Errorf("%d rows changed more than once (%v), want none", twice, err)
	}
}
