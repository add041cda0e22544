// Package seed is the lab's one catalog seeder: the chaos harness, the
// benchmarks and dev's demo fill the catalog table through it, so every
// harness writes rows the same way (version 1, the default table's shape or
// an operator's own table by its mapping).
package seed

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/catalog"
)

// Execer is what Items writes through: a *pgx.Conn, a *pgxpool.Pool or a
// transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Items is one tenant's run of items: IDs Prefix+n for n in [First,
// First+Count), n left-padded with zeros to Pad digits, at version 1
// (Insert), or existing ones written again one version up (Raise).
type Items struct {
	// Table is the catalog table and its mapping; the zero value is
	// catalog.items. Display goes into its first payload column, State into
	// its state column.
	Table  catalog.Table
	Tenant string
	Prefix string
	Pad    int // digits n is padded to; 0 pads nothing
	First  int
	Count  int
	// Display is the SQL expression of each row's display (jsonb), in terms
	// of t (the tenant, text), id (the item ID, text), n (its number, int)
	// and v (the version the row is written at); empty leaves display to
	// the table's default (Insert) or as it was (Raise). It is lab code's
	// own text, never user input.
	Display string
	// State is the row's state; empty leaves it to the table's default.
	State string
	// Batch is the rows per statement (one statement when 0): large seeds
	// in batches keep each transaction, and the WAL it writes at once, small.
	Batch int
	// SkipExisting leaves rows already present untouched (ON CONFLICT DO
	// NOTHING); otherwise an existing row is an error.
	SkipExisting bool
	// RaiseExisting writes a row already present again as Raise does (one
	// version up, Display at the new version), made active (State, or the
	// table's active state): insert or raise in one statement.
	RaiseExisting bool
}

// table is s.Table, or catalog.items for the zero value, validated.
func (s Items) table() (catalog.Table, error) {
	t := s.Table
	if t.Name == "" {
		t = catalog.DefaultTable()
	}
	if err := t.Validate(); err != nil {
		return t, fmt.Errorf("seed: %w", err)
	}
	if s.Display != "" && len(t.Payload) == 0 {
		return t, fmt.Errorf("seed: %s has no payload column to write the display into", t.Name)
	}
	if s.State != "" && t.StateColumn == "" {
		return t, fmt.Errorf("seed: %s has no state column", t.Name)
	}
	return t, nil
}

// raised is the SET list that writes the row cur one version up; tenant,
// id and n are the SQL of the t, id and n Display is in terms of.
func (s Items) raised(t catalog.Table, tenant, id, n string) string {
	v := "cur." + col(t.VersionColumn) + " + 1"
	set := col(t.VersionColumn) + " = " + v
	if t.UpdatedAtColumn != "" {
		set += ", " + col(t.UpdatedAtColumn) + " = now()"
	}
	if s.Display != "" {
		set += ", " + col(t.Payload[0]) + " = (SELECT " + s.Display + " FROM (SELECT " + tenant + " AS t, " + id + " AS id, " +
			n + " AS n, " + v + " AS v) AS r)"
	}
	return set
}

// Insert writes the items into the table.
func (s Items) Insert(ctx context.Context, db Execer) error {
	if s.SkipExisting && s.RaiseExisting {
		return fmt.Errorf("seed: tenant %q: SkipExisting and RaiseExisting both set", s.Tenant)
	}
	t, err := s.table()
	if err != nil {
		return err
	}
	key := col(t.TenantColumn) + ", " + col(t.ItemColumn)
	cols, vals := key+", "+col(t.VersionColumn), "t, id, v"
	if s.Display != "" {
		cols, vals = cols+", "+col(t.Payload[0]), vals+", "+s.Display
	}
	state := catalog.Literal(t.ActiveState)
	if s.State != "" {
		cols, vals, state = cols+", "+col(t.StateColumn), vals+", $6::text", "$6::text"
	}
	conflict := ""
	switch {
	case s.SkipExisting:
		conflict = " ON CONFLICT (" + key + ") DO NOTHING"
	case s.RaiseExisting:
		// The excluded row has the key of g's row but not its n.
		set := s.raised(t, "excluded."+col(t.TenantColumn), "excluded."+col(t.ItemColumn), "NULL::int")
		if t.StateColumn != "" {
			set += ", " + col(t.StateColumn) + " = " + state
		}
		conflict = " ON CONFLICT (" + key + ") DO UPDATE SET " + set
	}
	_, err = s.each(ctx, db, `INSERT INTO `+t.Qualified()+` AS cur (`+cols+`)
		SELECT `+vals+` FROM (`+rows+`) AS g`+conflict)
	return err
}

// Raise writes the items that are present (and active, where the table
// has a state column) again one version up, with Display at the new
// version, and returns how many rows it wrote; a missing item is left
// alone.
func (s Items) Raise(ctx context.Context, db Execer) (int64, error) {
	if s.State != "" || s.SkipExisting || s.RaiseExisting {
		return 0, fmt.Errorf("seed: tenant %q: Raise keeps the state and writes only present rows", s.Tenant)
	}
	t, err := s.table()
	if err != nil {
		return 0, err
	}
	where := "cur." + col(t.TenantColumn) + " = g.t AND cur." + col(t.ItemColumn) + " = g.id"
	if t.StateColumn != "" {
		where += " AND cur." + col(t.StateColumn) + " = " + catalog.Literal(t.ActiveState)
	}
	return s.each(ctx, db, `UPDATE `+t.Qualified()+` AS cur SET `+s.raised(t, "g.t", "g.id", "g.n")+` FROM (`+rows+`) AS g WHERE `+where)
}

// rows is the row source g of a run of items: t, id, n and v (1, the
// version a new row is written at).
const rows = `SELECT $1::text AS t, $2::text || lpad(n::text, greatest($3::int, length(n::text)), '0') AS id, n, 1 AS v
	FROM generate_series($4::int, $5::int) AS n`

// each runs q over s's items, Batch at a time, and returns the rows it
// wrote.
func (s Items) each(ctx context.Context, db Execer, q string) (int64, error) {
	if s.Count < 0 || s.First < 0 || s.Pad < 0 || s.Batch < 0 {
		return 0, fmt.Errorf("seed: tenant %q: negative count, first, pad or batch", s.Tenant)
	}
	batch := s.Batch
	if batch == 0 {
		batch = max(s.Count, 1)
	}
	var n int64
	for lo := s.First; lo < s.First+s.Count; lo += batch {
		hi := min(lo+batch, s.First+s.Count) - 1
		args := []any{s.Tenant, s.Prefix, s.Pad, lo, hi}
		if s.State != "" {
			args = append(args, s.State)
		}
		tag, err := db.Exec(ctx, q, args...)
		if err != nil {
			return n, fmt.Errorf("seed: tenant %q items %d-%d: %w", s.Tenant, lo, hi, err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// col is a column name quoted for SQL.
func col(name string) string { return pgx.Identifier{name}.Sanitize() }
