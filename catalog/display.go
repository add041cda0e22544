package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrDisplayReadsElsewhere: the display expression (PayloadSQL) reads
// something other than the item's own row, whose changes capture never
// sees: served values would go stale with no invalidation.
var ErrDisplayReadsElsewhere = errors.New("catalog: the display expression reads more than the item's row")

// Beginner starts a transaction (a *pgx.Conn or a *pgxpool.Pool).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// displayDepsSQL lists what the temporary view of the display reads (the
// dependencies of its rule): relations and functions, with each function's
// volatility and whether it is built in (oid below FirstNormalObjectId).
// Postgres records none on the objects initdb pins (the core built-in
// functions and system catalogs), so those are never listed.
const displayDepsSQL = `SELECT CASE WHEN d.refclassid = 'pg_class'::regclass THEN 'relation' ELSE 'function' END,
       CASE WHEN d.refclassid = 'pg_class'::regclass THEN d.refobjid::regclass::text ELSE d.refobjid::regprocedure::text END,
       d.refobjid = $1::regclass, coalesce(p.provolatile, ''), coalesce(p.oid < 16384, true)
FROM pg_depend d
JOIN pg_rewrite r ON d.classid = 'pg_rewrite'::regclass AND r.oid = d.objid
LEFT JOIN pg_proc p ON d.refclassid = 'pg_proc'::regclass AND p.oid = d.refobjid
WHERE r.ev_class = 'pg_temp.tidemark_display_check'::regclass
  AND d.refclassid IN ('pg_class'::regclass, 'pg_proc'::regclass)
  AND d.refobjid <> 'pg_temp.tidemark_display_check'::regclass
ORDER BY 1, 2`

// CheckDisplay checks that the display expression reads only the item's
// own row: no other table, view or sequence (its changes are not
// captured), no volatile function (a value that changes at every read),
// and no function of the database's own that is not IMMUTABLE (one may
// read a table). The core built-ins are not seen (displayDepsSQL): one
// that runs a query given as text (query_to_xml) is not refused. Display
// built from columns (Payload) needs no check.
// Postgres says what an expression reads: the check creates a temporary
// view of it, reads the view's dependencies and rolls back, so the role
// needs TEMP on the database when PayloadSQL is set.
func (t Table) CheckDisplay(ctx context.Context, db Beginner) error {
	if strings.TrimSpace(t.PayloadSQL) == "" {
		return nil
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("catalog: check the display expression: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // nothing was written
	if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TEMP VIEW tidemark_display_check AS SELECT %s AS display, %s AS deleted FROM %s",
		t.DisplaySQL(), t.DeletedSQL(), t.Qualified())); err != nil {
		return fmt.Errorf("catalog: check the display expression (%s) of %s: a temporary view of it (the role needs TEMP on the database when the display is an expression): %w", t.PayloadSQL, t.Name, err)
	}
	rows, err := tx.Query(ctx, displayDepsSQL, t.Qualified())
	if err != nil {
		return fmt.Errorf("catalog: check the display expression: read its dependencies: %w", err)
	}
	var bad []string
	for rows.Next() {
		var kind, name, volatility string
		var own, builtin bool
		if err := rows.Scan(&kind, &name, &own, &volatility, &builtin); err != nil {
			return fmt.Errorf("catalog: check the display expression: read its dependencies: %w", err)
		}
		switch {
		case kind == "relation" && !own:
			bad = append(bad, name+" (another relation: its changes are not captured)")
		case kind == "function" && volatility == "v":
			bad = append(bad, name+" (volatile: a value that changes at every read)")
		case kind == "function" && !builtin && volatility != "i":
			bad = append(bad, name+" (not IMMUTABLE: it may read tables whose changes are not captured)")
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("catalog: check the display expression: read its dependencies: %w", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s builds display from %s, which reads %s; build it from the row's own columns (and IMMUTABLE functions)",
			ErrDisplayReadsElsewhere, t.Name, t.PayloadSQL, strings.Join(bad, ", "))
	}
	return nil
}
