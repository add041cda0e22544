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

	"tidemark/catalog"
)

// Execer is what Items writes through: a *pgx.Conn, a *pgxpool.Pool or a
// transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Items is one tenant's run of items: IDs Prefix+n for n in [First,
// First+Count), n left-padded with zeros to Pad digits, at version 1.
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
	// of t (the tenant, text), id (the item ID, text) and n (its number,
	// int); empty leaves display to the table's default. It is lab code's
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
}

// Insert writes the items into the table.
func (s Items) Insert(ctx context.Context, db Execer) error {
	if s.Count < 0 || s.First < 0 || s.Pad < 0 || s.Batch < 0 {
		return fmt.Errorf("seed: tenant %q: negative count, first, pad or batch", s.Tenant)
	}
	t := s.Table
	if t.Name == "" {
		t = catalog.DefaultTable()
	}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	key := col(t.TenantColumn) + ", " + col(t.ItemColumn)
	cols, vals := key+", "+col(t.VersionColumn), "t, id, 1"
	if s.Display != "" {
		if len(t.Payload) == 0 {
			return fmt.Errorf("seed: %s has no payload column to write the display into", t.Name)
		}
		cols, vals = cols+", "+col(t.Payload[0]), vals+", "+s.Display
	}
	if s.State != "" {
		if t.StateColumn == "" {
			return fmt.Errorf("seed: %s has no state column", t.Name)
		}
		cols, vals = cols+", "+col(t.StateColumn), vals+", $6::text"
	}
	conflict := ""
	if s.SkipExisting {
		conflict = " ON CONFLICT (" + key + ") DO NOTHING"
	}
	q := `INSERT INTO ` + t.Qualified() + ` (` + cols + `)
		SELECT ` + vals + ` FROM (
			SELECT $1::text AS t, $2::text || lpad(n::text, greatest($3::int, length(n::text)), '0') AS id, n
			FROM generate_series($4::int, $5::int) AS n) AS g` + conflict
	batch := s.Batch
	if batch == 0 {
		batch = max(s.Count, 1)
	}
	for lo := s.First; lo < s.First+s.Count; lo += batch {
		hi := min(lo+batch, s.First+s.Count) - 1
		args := []any{s.Tenant, s.Prefix, s.Pad, lo, hi}
		if s.State != "" {
			args = append(args, s.State)
		}
		if _, err := db.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("seed: tenant %q items %d-%d: %w", s.Tenant, lo, hi, err)
		}
	}
	return nil
}

// col is a column name quoted for SQL.
func col(name string) string { return pgx.Identifier{name}.Sanitize() }
