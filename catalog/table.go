// Package catalog describes the operator's catalog table to every command
// that touches it: which table holds the items, which columns carry the
// tenant, the item, the version and the state, which state value is a
// tombstone, and which columns (or SQL expression) become an item's
// `display`. capture decodes changes with it, serve and the auditor read the
// source through it, inspect compares against it and adopt prepares an
// existing table for it. tidemark's own tables (API keys, idempotency
// records, the heartbeat row) live in a schema of their own (OwnSchema),
// never beside the operator's.
package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
)

// OwnSchema is the schema of tidemark's own tables.
const OwnSchema = "tidemark"

// Table is the mapping of one catalog table.
type Table struct {
	Name          string // schema.table
	TenantColumn  string
	ItemColumn    string
	VersionColumn string // bigint (or integer) that increases on every write
	StateColumn   string // "" = no tombstones
	DeletedState  string // the StateColumn value of a tombstone
	ActiveState   string // the StateColumn value the reference API writes for a live item
	// UpdatedAtColumn orders the management list; "" = no list.
	UpdatedAtColumn string
	// Payload lists the columns that make up display: one column is used as
	// its JSON value (to_jsonb), several become an object keyed by column
	// name. PayloadSQL, when set, is a SQL expression over the row used
	// instead (it must yield json or jsonb); Payload is then ignored.
	Payload    []string
	PayloadSQL string
}

// DefaultTable is the table `tidemark migrate` creates: catalog.items.
func DefaultTable() Table {
	return Table{
		Name:            promise.Table,
		TenantColumn:    "tenant_id",
		ItemColumn:      "item_id",
		VersionColumn:   "version",
		StateColumn:     "state",
		DeletedState:    "deleted",
		ActiveState:     "active",
		UpdatedAtColumn: "updated_at",
		Payload:         []string{"display"},
	}
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// Validate reports every problem at once, one config.FieldError per field.
func (t Table) Validate() error {
	var p config.Problems
	if _, _, ok := SplitName(t.Name); !ok {
		p.Add("Name", "%q must be schema.table (letters, digits, underscores)", t.Name)
	}
	for _, f := range [][2]string{{"TenantColumn", t.TenantColumn}, {"ItemColumn", t.ItemColumn}, {"VersionColumn", t.VersionColumn}} {
		if !ident.MatchString(f[1]) {
			p.Add(f[0], "%q must be a column name (letters, digits, underscores)", f[1])
		}
	}
	if t.StateColumn != "" {
		if !ident.MatchString(t.StateColumn) {
			p.Add("StateColumn", "%q must be a column name or empty (no tombstones)", t.StateColumn)
		}
		if t.DeletedState == "" {
			p.Add("DeletedState", "must not be empty when the state column is set")
		}
		if t.ActiveState == "" || t.ActiveState == t.DeletedState {
			p.Add("ActiveState", "%q must be set and differ from the deleted state", t.ActiveState)
		}
	}
	if t.UpdatedAtColumn != "" && !ident.MatchString(t.UpdatedAtColumn) {
		p.Add("UpdatedAtColumn", "%q must be a column name or empty (no management list)", t.UpdatedAtColumn)
	}
	if len(t.Payload) == 0 && strings.TrimSpace(t.PayloadSQL) == "" {
		p.Add("Payload", "must name at least one column (or set the payload SQL expression)")
	}
	for _, c := range t.Payload {
		if !ident.MatchString(c) {
			p.Add("Payload", "%q must be a column name (letters, digits, underscores)", c)
		}
	}
	if strings.Contains(t.PayloadSQL, ";") {
		p.Add("PayloadSQL", "must be one expression (no ';')")
	}
	return p.Err()
}

// SplitName splits "schema.table".
func SplitName(name string) (schemaName, table string, ok bool) {
	s, n, ok := strings.Cut(name, ".")
	return s, n, ok && ident.MatchString(s) && ident.MatchString(n)
}

// Qualified is the table's name quoted for SQL.
func (t Table) Qualified() string {
	s, n, _ := SplitName(t.Name)
	return pgx.Identifier{s, n}.Sanitize()
}

func q(col string) string { return pgx.Identifier{col}.Sanitize() }

// DisplaySQL is the SQL expression (jsonb) that builds display from a row.
func (t Table) DisplaySQL() string {
	if strings.TrimSpace(t.PayloadSQL) != "" {
		return "(" + t.PayloadSQL + ")::jsonb"
	}
	if len(t.Payload) == 1 {
		return "to_jsonb(" + q(t.Payload[0]) + ")"
	}
	parts := make([]string, 0, 2*len(t.Payload))
	for _, c := range t.Payload {
		parts = append(parts, "'"+c+"'", q(c))
	}
	return "jsonb_build_object(" + strings.Join(parts, ", ") + ")"
}

// DeletedSQL is a boolean SQL expression: the row is a tombstone.
func (t Table) DeletedSQL() string {
	if t.StateColumn == "" {
		return "false"
	}
	return fmt.Sprintf("(%s IS NOT DISTINCT FROM %s)", q(t.StateColumn), Literal(t.DeletedState))
}

// ReadSQL selects (version, display, deleted) of one item by ($1 tenant, $2
// item) for one reader class (a budget class). The query is a CTE named
// source_read_<class>, so pg_stat_statements (which groups statements by
// parse tree: comments do not count, a CTE's name does) keeps one row per
// class, and its comment names the class for a person (and the chaos
// budget check) reading that view; the planner inlines the CTE.
func (t Table) ReadSQL(class string) string {
	cte := q("source_read_" + class)
	return fmt.Sprintf("WITH %s AS (SELECT %s::bigint AS version, %s AS display, %s AS deleted FROM %s WHERE %s = $1 AND %s = $2) SELECT version, display, deleted FROM %s /* tidemark source read: %s */",
		cte, q(t.VersionColumn), t.DisplaySQL(), t.DeletedSQL(), t.Qualified(), q(t.TenantColumn), q(t.ItemColumn), cte, class)
}

// ListSQL selects (item, version, display, deleted, updated_at) of one
// tenant's items ordered by (updated_at, item), after the cursor ($2
// updated_at, $3 item), at most $4 rows.
func (t Table) ListSQL() string {
	u, i := q(t.UpdatedAtColumn)+"::timestamptz", q(t.ItemColumn)
	return fmt.Sprintf("SELECT %s::text, %s::bigint, %s, %s, %s /* tidemark list */ FROM %s WHERE %s = $1 AND (%s, %s::text) > ($2::timestamptz, $3::text) ORDER BY %s, %s LIMIT $4",
		i, q(t.VersionColumn), t.DisplaySQL(), t.DeletedSQL(), u, t.Qualified(), q(t.TenantColumn), u, i, u, i)
}

// Columns is every column the mapping names, without duplicates.
func (t Table) Columns() []string {
	var out []string
	add := func(c string) {
		if c == "" {
			return
		}
		for _, o := range out {
			if o == c {
				return
			}
		}
		out = append(out, c)
	}
	add(t.TenantColumn)
	add(t.ItemColumn)
	add(t.VersionColumn)
	add(t.StateColumn)
	add(t.UpdatedAtColumn)
	if strings.TrimSpace(t.PayloadSQL) == "" {
		for _, c := range t.Payload {
			add(c)
		}
	}
	return out
}

// PublishedColumns are the columns the publication must carry: key, version
// and state, never the payload.
func (t Table) PublishedColumns() []string {
	out := []string{t.TenantColumn, t.ItemColumn, t.VersionColumn}
	if t.StateColumn != "" {
		out = append(out, t.StateColumn)
	}
	return out
}

// Literal quotes s as a SQL string literal.
func Literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// VersionsSQL selects (tenant, item, version, state, updated_at) of the
// items named by two arrays ($1 tenants, $2 items); state is "deleted" for a
// tombstone and "active" otherwise, and updated_at is the read's own time
// when the table has no updated-at column.
func (t Table) VersionsSQL() string {
	upd := "now()"
	if t.UpdatedAtColumn != "" {
		upd = "i." + q(t.UpdatedAtColumn) + "::timestamptz"
	}
	state := "'active'"
	if t.StateColumn != "" {
		state = fmt.Sprintf("CASE WHEN i.%s IS NOT DISTINCT FROM %s THEN 'deleted' ELSE 'active' END", q(t.StateColumn), Literal(t.DeletedState))
	}
	return fmt.Sprintf("SELECT i.%s::text, i.%s::text, i.%s::bigint, %s, %s /* tidemark source versions */ FROM %s i JOIN unnest($1::text[], $2::text[]) AS k(t, it) ON i.%s = k.t AND i.%s = k.it",
		q(t.TenantColumn), q(t.ItemColumn), q(t.VersionColumn), state, upd, t.Qualified(), q(t.TenantColumn), q(t.ItemColumn))
}

// Writable says why the reference API cannot write this table (nil: it
// can): writes need one payload column (display is stored as it is), a state
// column for tombstones and an updated-at column.
func (t Table) Writable() error {
	switch {
	case strings.TrimSpace(t.PayloadSQL) != "" || len(t.Payload) != 1:
		return fmt.Errorf("catalog: %s builds display from %s, so writes go through your own application", t.Name, t.DisplaySQL())
	case t.StateColumn == "":
		return fmt.Errorf("catalog: %s has no state column, so a delete cannot keep its row as a tombstone", t.Name)
	case t.UpdatedAtColumn == "":
		return fmt.Errorf("catalog: %s has no updated-at column", t.Name)
	}
	return nil
}

// WriteSQL is the reference API's statements for a writable table.
type WriteSQL struct {
	Insert  string // ($1 tenant, $2 item, $3 display): version 1, active; nothing on conflict
	Version string // ($1, $2) → version
	Lock    string // ($1, $2) → version, deleted; FOR UPDATE
	Update  string // ($1, $2, $3 display) → new version
	Delete  string // ($1, $2) → new version; the row stays as a tombstone
}

// Writes builds WriteSQL; call Writable first.
func (t Table) Writes() WriteSQL {
	tb, tn, it, v := t.Qualified(), q(t.TenantColumn), q(t.ItemColumn), q(t.VersionColumn)
	d, st, up := q(t.Payload[0]), q(t.StateColumn), q(t.UpdatedAtColumn)
	return WriteSQL{
		Insert: fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s, %s) VALUES ($1, $2, 1, $3, %s) ON CONFLICT (%s, %s) DO NOTHING",
			tb, tn, it, v, d, st, Literal(t.ActiveState), tn, it),
		Version: fmt.Sprintf("SELECT %s::bigint FROM %s WHERE %s = $1 AND %s = $2", v, tb, tn, it),
		Lock:    fmt.Sprintf("SELECT %s::bigint, %s FROM %s WHERE %s = $1 AND %s = $2 FOR UPDATE", v, t.DeletedSQL(), tb, tn, it),
		Update: fmt.Sprintf("UPDATE %s SET %s = %s + 1, %s = $3, %s = now() WHERE %s = $1 AND %s = $2 RETURNING %s::bigint",
			tb, v, v, d, up, tn, it, v),
		Delete: fmt.Sprintf("UPDATE %s SET %s = %s + 1, %s = %s, %s = NULL, %s = now() WHERE %s = $1 AND %s = $2 RETURNING %s::bigint",
			tb, v, v, st, Literal(t.DeletedState), d, up, tn, it, v),
	}
}

// Fingerprint names what a cached entry of the table holds: the table and
// hash of the columns that key, version and make up an item and its display
// ("catalog.items#3f1c0e9a2b7d"). Two mappings that would cache different
// values for one (tenant, item) have different fingerprints, so a cache-tier
// namespace can be bound to one (cache.Identity). The active state and the
// list's column change nothing cached and are left out.
func (t Table) Fingerprint() string {
	payload := strings.Join(t.Payload, ",")
	if t.PayloadSQL != "" {
		payload = "" // ignored then (Table.Payload)
	}
	h := sha256.New()
	for _, s := range []string{t.Name, t.TenantColumn, t.ItemColumn, t.VersionColumn, t.StateColumn, t.DeletedState, payload, t.PayloadSQL} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	return t.Name + "#" + hex.EncodeToString(h.Sum(nil))[:12]
}
