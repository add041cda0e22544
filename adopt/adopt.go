// Package adopt prepares an existing catalog table for tidemark (`tidemark
// adopt`): it checks the table against the mapping (catalog.Table), makes the
// replica identity the (tenant, item) key, publishes key, version and state
// (never the payload), installs the version trigger that keeps the version
// honest, and creates tidemark's own tables in their own schema. Every step
// is idempotent; a dry run prints the SQL instead of running it; what it
// cannot do safely it reports with the SQL to run by hand.
package adopt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/migrations"
)

// What a DELETE on the adopted table does.
const (
	DeletesTombstone = "tombstone" // the trigger turns it into a tombstone update
	DeletesRefuse    = "refuse"    // the trigger raises an error
)

// Config of an adoption.
type Config struct {
	PG          string
	Table       catalog.Table
	Publication string
	Deletes     string // DeletesTombstone or DeletesRefuse
	DryRun      bool
}

// DefaultConfig is tidemark adopt's defaults (PG is required).
func DefaultConfig() Config {
	return Config{Table: catalog.DefaultTable(), Publication: "tidemark", Deletes: DeletesTombstone}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if strings.TrimSpace(c.PG) == "" {
		p.Add("PG", "is required")
	}
	p.Nested("Table", c.Table.Validate())
	if strings.TrimSpace(c.Publication) == "" {
		p.Add("Publication", "must not be empty")
	}
	switch c.Deletes {
	case DeletesTombstone, DeletesRefuse:
	default:
		p.Add("Deletes", "%q must be tombstone or refuse", c.Deletes)
	}
	if c.Deletes == DeletesTombstone && c.Table.StateColumn == "" {
		p.Add("Deletes", "tombstone needs a state column (or choose refuse)")
	}
	return p.Err()
}

// Step is one thing adopt did, would do (dry run) or could not do.
type Step struct {
	What   string
	SQL    string // "" for a check that needed no change
	Manual bool   // not done: the operator must decide and run SQL by hand
}

// Report lists the steps in order.
type Report struct {
	Steps []Step
}

// Manual is the steps left to the operator.
func (r Report) Manual() []Step {
	var out []Step
	for _, s := range r.Steps {
		if s.Manual {
			out = append(out, s)
		}
	}
	return out
}

// ErrNotAdoptable is matched by errors.Is when the table cannot be adopted
// as it stands; the report says what to change.
var ErrNotAdoptable = errors.New("adopt: the table cannot be adopted as it stands")

// Run adopts cfg.Table. It returns ErrNotAdoptable (with the report) when a
// step needs the operator.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (Report, error) {
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	conn, err := pgx.Connect(ctx, cfg.PG)
	if err != nil {
		return Report{}, fmt.Errorf("adopt: connect: %w", err)
	}
	defer conn.Close(context.Background())
	a := &adopter{cfg: cfg, conn: conn, log: log}
	if err := a.run(ctx); err != nil {
		return a.rep, err
	}
	if len(a.rep.Manual()) > 0 {
		return a.rep, ErrNotAdoptable
	}
	return a.rep, nil
}

type adopter struct {
	cfg  Config
	conn *pgx.Conn
	log  *slog.Logger
	rep  Report
}

func (a *adopter) did(what, sql string) error {
	a.rep.Steps = append(a.rep.Steps, Step{What: what, SQL: sql})
	if sql == "" || a.cfg.DryRun {
		return nil
	}
	if _, err := a.conn.Exec(context.Background(), sql); err != nil {
		return fmt.Errorf("adopt: %s: %w", what, err)
	}
	a.log.Info("adopt: done", "step", what)
	return nil
}

func (a *adopter) manual(what, sql string) {
	a.rep.Steps = append(a.rep.Steps, Step{What: what, SQL: sql, Manual: true})
}

func (a *adopter) run(ctx context.Context) error {
	t := a.cfg.Table
	schemaName, name, _ := catalog.SplitName(t.Name)
	var oid uint32
	var ident string
	err := a.conn.QueryRow(ctx, `SELECT c.oid, c.relreplident::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schemaName, name).Scan(&oid, &ident)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: table %s does not exist", ErrNotAdoptable, t.Name)
	}
	if err != nil {
		return fmt.Errorf("adopt: look up %s: %w", t.Name, err)
	}
	types, err := a.columnTypes(ctx, oid)
	if err != nil {
		return err
	}
	if err := a.checkColumns(types); err != nil {
		return err
	}
	// A display expression that reads more than the row would be served
	// stale whatever capture does: refused before anything is changed.
	if err := t.CheckDisplay(ctx, a.conn); err != nil {
		if errors.Is(err, catalog.ErrDisplayReadsElsewhere) {
			return fmt.Errorf("%w: %w", ErrNotAdoptable, err)
		}
		return fmt.Errorf("adopt: %w", err)
	}
	if err := a.key(ctx, oid, ident); err != nil {
		return err
	}
	if len(a.rep.Manual()) > 0 {
		// Publishing a column list that does not cover the replica
		// identity would make Postgres refuse every UPDATE of the table.
		return nil
	}
	if err := a.did("create tidemark's own tables (schema "+catalog.OwnSchema+")", migrations.OwnTablesSQL); err != nil {
		return err
	}
	if err := a.versionColumn(ctx); err != nil {
		return err
	}
	if err := a.publication(ctx); err != nil {
		return err
	}
	if err := a.trigger(); err != nil {
		return err
	}
	return a.otherTriggers(ctx, oid)
}

// columnTypes maps every live column of the table to its type name.
func (a *adopter) columnTypes(ctx context.Context, oid uint32) (map[string]string, error) {
	rows, err := a.conn.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, oid)
	if err != nil {
		return nil, fmt.Errorf("adopt: read columns: %w", err)
	}
	types := map[string]string{}
	for rows.Next() {
		var n, ty string
		if err := rows.Scan(&n, &ty); err != nil {
			return nil, fmt.Errorf("adopt: read columns: %w", err)
		}
		types[n] = ty
	}
	return types, rows.Err()
}

func (a *adopter) checkColumns(types map[string]string) error {
	t := a.cfg.Table
	var missing []string
	for _, c := range t.Columns() {
		if _, ok := types[c]; !ok {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s has no column(s) %s", ErrNotAdoptable, t.Name, strings.Join(missing, ", "))
	}
	for _, c := range []string{t.TenantColumn, t.ItemColumn} {
		if ty := types[c]; ty != "text" && !strings.HasPrefix(ty, "character varying") {
			// Keys travel as text end to end (Kafka keys, Redis keys, the
			// source read's parameters); a cast per read would lose the index.
			return fmt.Errorf("%w: %s is %s; tenant and item columns must be text or varchar", ErrNotAdoptable, c, ty)
		}
	}
	switch types[t.VersionColumn] {
	case "bigint", "integer", "smallint":
	default:
		return fmt.Errorf("%w: version column %s is %s; it must be an integer type that increases on every write", ErrNotAdoptable, t.VersionColumn, types[t.VersionColumn])
	}
	if t.UpdatedAtColumn != "" && !strings.HasPrefix(types[t.UpdatedAtColumn], "timestamp") {
		return fmt.Errorf("%w: updated-at column %s is %s; it must be a timestamp", ErrNotAdoptable, t.UpdatedAtColumn, types[t.UpdatedAtColumn])
	}
	return a.did(fmt.Sprintf("check columns of %s (%s)", t.Name, strings.Join(t.Columns(), ", ")), "")
}

// key makes sure (tenant, item) is unique and is the replica identity: the
// publication's column list must cover the replica identity, or Postgres
// refuses every UPDATE of the table.
func (a *adopter) key(ctx context.Context, oid uint32, ident string) error {
	t := a.cfg.Table
	want := []string{t.TenantColumn, t.ItemColumn}
	rows, err := a.conn.Query(ctx, `SELECT (SELECT relname FROM pg_class WHERE oid = i.indexrelid)::text, i.indisprimary, i.indisreplident,
			array(SELECT a.attname::text FROM unnest(i.indkey) k JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k)
		FROM pg_index i WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indimmediate AND i.indpred IS NULL AND i.indexprs IS NULL`, oid)
	if err != nil {
		return fmt.Errorf("adopt: read indexes: %w", err)
	}
	type index struct {
		name             string
		primary, replica bool
		cols             []string
	}
	var match *index
	for rows.Next() {
		var ix index
		if err := rows.Scan(&ix.name, &ix.primary, &ix.replica, &ix.cols); err != nil {
			return fmt.Errorf("adopt: read indexes: %w", err)
		}
		if sameSet(ix.cols, want) && (match == nil || ix.primary) {
			m := ix
			match = &m
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("adopt: read indexes: %w", err)
	}
	if match == nil {
		a.manual(fmt.Sprintf("%s needs a unique key on (%s, %s): items are identified by tenant and item", t.Name, t.TenantColumn, t.ItemColumn),
			fmt.Sprintf("CREATE UNIQUE INDEX CONCURRENTLY %s ON %s (%s, %s);", pgx.Identifier{name(t) + "_tidemark_key"}.Sanitize(),
				t.Qualified(), pgx.Identifier{t.TenantColumn}.Sanitize(), pgx.Identifier{t.ItemColumn}.Sanitize()))
		return nil
	}
	if (ident == "d" && match.primary) || (ident == "i" && match.replica) {
		return a.did(fmt.Sprintf("replica identity is the (%s, %s) key %s", t.TenantColumn, t.ItemColumn, match.name), "")
	}
	return a.did(fmt.Sprintf("make the (%s, %s) key %s the replica identity (the publication's column list must cover it)", t.TenantColumn, t.ItemColumn, match.name),
		fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY USING INDEX %s", t.Qualified(), pgx.Identifier{match.name}.Sanitize()))
}

// publication publishes exactly key, version and state of the table, and
// tidemark's heartbeat row.
func (a *adopter) publication(ctx context.Context) error {
	t := a.cfg.Table
	pub := pgx.Identifier{a.cfg.Publication}.Sanitize()
	cols := quoteAll(t.PublishedColumns())
	member := fmt.Sprintf("%s (%s)", t.Qualified(), strings.Join(cols, ", "))
	var exists bool
	if err := a.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, a.cfg.Publication).Scan(&exists); err != nil {
		return fmt.Errorf("adopt: read publications: %w", err)
	}
	if !exists {
		return a.did("create publication "+a.cfg.Publication+" with key, version and state (never the payload), and the heartbeat row",
			fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s, %s", pub, member, migrations.HeartbeatTable))
	}
	schemaName, name, _ := catalog.SplitName(t.Name)
	var have []string
	err := a.conn.QueryRow(ctx, `SELECT attnames::text[] FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`,
		a.cfg.Publication, schemaName, name).Scan(&have)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if err := a.did("add "+t.Name+" to publication "+a.cfg.Publication, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, member)); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("adopt: read publication %s: %w", a.cfg.Publication, err)
	case !sameSet(have, t.PublishedColumns()):
		if err := a.did(fmt.Sprintf("publish only %s of %s in %s (it published %s)", strings.Join(t.PublishedColumns(), ", "), t.Name, a.cfg.Publication, strings.Join(have, ", ")),
			fmt.Sprintf("ALTER PUBLICATION %s SET TABLE %s%s", pub, member, a.otherMembers(ctx, t))); err != nil {
			return err
		}
	default:
		if err := a.did("publication "+a.cfg.Publication+" carries "+strings.Join(have, ", ")+" of "+t.Name, ""); err != nil {
			return err
		}
	}
	var hb bool
	if err := a.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = 'heartbeat')`,
		a.cfg.Publication, catalog.OwnSchema).Scan(&hb); err != nil {
		return fmt.Errorf("adopt: read publication %s: %w", a.cfg.Publication, err)
	}
	if hb {
		return nil
	}
	return a.did("add the heartbeat row to publication "+a.cfg.Publication, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, migrations.HeartbeatTable))
}

// otherMembers keeps the publication's other tables when SET TABLE rewrites
// the adopted table's column list.
func (a *adopter) otherMembers(ctx context.Context, t catalog.Table) string {
	schemaName, name, _ := catalog.SplitName(t.Name)
	rows, err := a.conn.Query(ctx, `SELECT schemaname, tablename, attnames::text[] FROM pg_publication_tables
		WHERE pubname = $1 AND NOT (schemaname = $2 AND tablename = $3)`, a.cfg.Publication, schemaName, name)
	if err != nil {
		return ""
	}
	defer rows.Close()
	var out string
	for rows.Next() {
		var s, n string
		var cols []string
		if rows.Scan(&s, &n, &cols) != nil {
			continue
		}
		out += fmt.Sprintf(", %s (%s)", pgx.Identifier{s, n}.Sanitize(), strings.Join(quoteAll(cols), ", "))
	}
	return out
}

// TriggerName is the version trigger's name. Postgres fires a table's
// BEFORE row triggers of one event in name order (bytewise), and a trigger
// that runs after the version trigger can change the payload once the
// version is decided: the name sorts after every usual one, and every run
// checks that no other trigger sorts after it (otherTriggers).
const TriggerName = "zz_tidemark_version"

// oldTriggerName is the version trigger's name before it had to sort last.
const oldTriggerName = "tidemark_version"

// versionColumn makes the version column NOT NULL with CHECK (version > 0):
// capture cannot turn a NULL or non-positive version into an invalidation
// (it purges the key instead), so the table must not hold one. Rows that
// already do are the operator's to fix: each is a change.
func (a *adopter) versionColumn(ctx context.Context) error {
	t := a.cfg.Table
	v := pgx.Identifier{t.VersionColumn}.Sanitize()
	check := name(t) + "_tidemark_version_positive"
	var notNull, hasCheck bool
	var bad int64
	if err := a.conn.QueryRow(ctx, fmt.Sprintf(`SELECT
		(SELECT attnotnull FROM pg_attribute WHERE attrelid = '%[1]s'::regclass AND attname = $1),
		EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = '%[1]s'::regclass AND contype = 'c' AND convalidated
			AND (conname = $2 OR pg_get_constraintdef(oid) = 'CHECK ((' || quote_ident($1) || ' > 0))')),
		(SELECT count(*) FROM %[1]s WHERE %[2]s IS NULL OR %[2]s <= 0)`, strings.ReplaceAll(t.Qualified(), "'", "''"), v),
		t.VersionColumn, check).Scan(&notNull, &hasCheck, &bad); err != nil {
		return fmt.Errorf("adopt: read the version column's constraints: %w", err)
	}
	if bad > 0 {
		a.manual(fmt.Sprintf("%d row(s) of %s have a NULL, zero or negative %s: give each a version above 0 (each UPDATE is a change), then run adopt again to add NOT NULL and CHECK (%s > 0)",
			bad, t.Name, t.VersionColumn, t.VersionColumn),
			fmt.Sprintf("UPDATE %s SET %s = 1 WHERE %s IS NULL OR %s <= 0;", t.Qualified(), v, v, v))
		return nil
	}
	if notNull && hasCheck {
		return a.did(fmt.Sprintf("%s is NOT NULL with CHECK (%s > 0)", t.VersionColumn, t.VersionColumn), "")
	}
	var sql []string
	if !notNull {
		sql = append(sql, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL;", t.Qualified(), v))
	}
	if !hasCheck {
		c := pgx.Identifier{check}.Sanitize()
		sql = append(sql, fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s CHECK (%s > 0) NOT VALID;", t.Qualified(), c, v),
			fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s;", t.Qualified(), c))
	}
	return a.did(fmt.Sprintf("make %s NOT NULL with CHECK (%s > 0): a NULL or non-positive version cannot be invalidated by version",
		t.VersionColumn, t.VersionColumn), strings.Join(sql, "\n"))
}

// trigger installs the version trigger: an INSERT without a version above 0
// gets 1; an UPDATE that changes the payload or the state without raising
// the version, that lowers it or sets it NULL, gets the next version (a
// DBA's display-only UPDATE still invalidates, and a version never goes back
// below a floor the cache holds), and a DELETE becomes a tombstone or is
// refused, because a deleted row's version could come back lower. Both
// triggers fire ALWAYS, also under session_replication_role = replica
// (pg_restore, logical replication's apply workers, ETL loaders); a trigger
// named before TriggerName (older adoptions) is replaced.
func (a *adopter) trigger() error {
	t := a.cfg.Table
	fn := pgx.Identifier{catalog.OwnSchema, "bump_" + schemaOf(t) + "_" + name(t)}.Sanitize()
	trg := pgx.Identifier{TriggerName}.Sanitize()
	del := pgx.Identifier{"tidemark_delete"}.Sanitize()
	v := pgx.Identifier{t.VersionColumn}.Sanitize()
	var changed []string
	for _, c := range append(append([]string{}, t.Payload...), t.StateColumn) {
		if c != "" {
			qc := pgx.Identifier{c}.Sanitize()
			changed = append(changed, fmt.Sprintf("NEW.%s IS DISTINCT FROM OLD.%s", qc, qc))
		}
	}
	cond := strings.Join(changed, " OR ")
	if t.PayloadSQL != "" {
		// An expression may read any column: every change but the version's counts.
		cond = fmt.Sprintf("(to_jsonb(NEW) - %s) IS DISTINCT FROM (to_jsonb(OLD) - %s)", catalog.Literal(t.VersionColumn), catalog.Literal(t.VersionColumn))
	}
	onDelete := fmt.Sprintf("RAISE EXCEPTION 'tidemark: rows of %s are never deleted: set %s to %s instead (tidemark adopt --deletes refuse)'; ",
		strings.ReplaceAll(t.Name, "'", "''"), t.StateColumn, strings.ReplaceAll(t.DeletedState, "'", "''"))
	if a.cfg.Deletes == DeletesTombstone {
		onDelete = fmt.Sprintf("UPDATE %s SET %s = %s, %s = OLD.%s + 1 WHERE %s = OLD.%s AND %s = OLD.%s; RETURN NULL;",
			t.Qualified(), pgx.Identifier{t.StateColumn}.Sanitize(), catalog.Literal(t.DeletedState), v, v,
			pgx.Identifier{t.TenantColumn}.Sanitize(), pgx.Identifier{t.TenantColumn}.Sanitize(),
			pgx.Identifier{t.ItemColumn}.Sanitize(), pgx.Identifier{t.ItemColumn}.Sanitize())
	}
	sql := fmt.Sprintf(`CREATE OR REPLACE FUNCTION %[1]s() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'DELETE' THEN
    %[2]s
  END IF;
  IF TG_OP = 'INSERT' THEN
    IF NEW.%[3]s IS NULL OR NEW.%[3]s < 1 THEN
      NEW.%[3]s := 1;
    END IF;
    RETURN NEW;
  END IF;
  IF NEW.%[3]s IS NULL OR NEW.%[3]s < coalesce(OLD.%[3]s, 0) OR (NEW.%[3]s IS NOT DISTINCT FROM OLD.%[3]s AND (%[4]s)) THEN
    NEW.%[3]s := coalesce(OLD.%[3]s, 0) + 1;
  END IF;
  RETURN NEW;
END $fn$;
DROP TRIGGER IF EXISTS %[8]s ON %[6]s;
CREATE OR REPLACE TRIGGER %[5]s BEFORE INSERT OR UPDATE ON %[6]s FOR EACH ROW EXECUTE FUNCTION %[1]s();
CREATE OR REPLACE TRIGGER %[7]s BEFORE DELETE ON %[6]s FOR EACH ROW EXECUTE FUNCTION %[1]s();
ALTER TABLE %[6]s ENABLE ALWAYS TRIGGER %[5]s;
ALTER TABLE %[6]s ENABLE ALWAYS TRIGGER %[7]s;`,
		fn, onDelete, v, cond, trg, t.Qualified(), del, pgx.Identifier{oldTriggerName}.Sanitize())
	what := "install the version trigger " + TriggerName + " (BEFORE INSERT OR UPDATE, ENABLE ALWAYS: also under session_replication_role = replica): " +
		"an INSERT without a version above 0 gets 1, an UPDATE of the payload or state without a higher version (or with a NULL one) gets the next one; a DELETE "
	if a.cfg.Deletes == DeletesTombstone {
		what += "becomes a tombstone"
	} else {
		what += "is refused"
	}
	return a.did(what, sql)
}

// Trigger states, pg_trigger.tgenabled.
var triggerStates = map[string]string{
	"O": "enabled", "D": "DISABLED", "R": "ENABLE REPLICA (fires only under session_replication_role = replica)",
	"A": "ENABLE ALWAYS",
}

// otherTriggers lists the table's other BEFORE row triggers on INSERT or
// UPDATE with their states, and leaves to the operator every one that
// sorts after TriggerName: it runs once the version is decided, so a change
// it makes to the payload keeps the version. The pipeline still invalidates
// such a change by its event (docs/design.md, "Freshness watermark"); the
// version no longer says the row changed. It also says what no trigger can
// guard: ALTER TABLE ... DISABLE TRIGGER.
func (a *adopter) otherTriggers(ctx context.Context, oid uint32) error {
	t := a.cfg.Table
	rows, err := a.conn.Query(ctx, `SELECT tgname::text, tgenabled::text, (tgtype & 4) <> 0, (tgtype & 16) <> 0 FROM pg_trigger
		WHERE tgrelid = $1 AND NOT tgisinternal AND (tgtype & 1) <> 0 AND (tgtype & 2) <> 0 AND (tgtype & 20) <> 0
		ORDER BY tgname COLLATE "C"`, oid)
	if err != nil {
		return fmt.Errorf("adopt: read triggers: %w", err)
	}
	type trig struct {
		name, state string
		ins, upd    bool
	}
	var list []trig
	for rows.Next() {
		var tr trig
		if err := rows.Scan(&tr.name, &tr.state, &tr.ins, &tr.upd); err != nil {
			return fmt.Errorf("adopt: read triggers: %w", err)
		}
		list = append(list, tr)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("adopt: read triggers: %w", err)
	}
	var others []string
	for _, tr := range list {
		if tr.name == TriggerName || tr.name == oldTriggerName {
			if !a.cfg.DryRun && tr.name == TriggerName && tr.state != "A" {
				return fmt.Errorf("adopt: %s on %s is %s after adoption", TriggerName, t.Name, triggerStates[tr.state])
			}
			continue
		}
		var ev []string
		if tr.ins {
			ev = append(ev, "INSERT")
		}
		if tr.upd {
			ev = append(ev, "UPDATE")
		}
		desc := fmt.Sprintf("%s (BEFORE %s, %s)", tr.name, strings.Join(ev, " OR "), triggerStates[tr.state])
		others = append(others, desc)
		if tr.name > TriggerName && tr.state != "D" {
			renamed := "tm_" + tr.name
			if len(renamed) > 63 {
				renamed = renamed[:63]
			}
			a.manual(fmt.Sprintf("trigger %s sorts after %s, so it runs once the version is decided: a change it makes keeps the version. Rename it to sort before (or have it raise %s itself and rename it), then run adopt again",
				desc, TriggerName, t.VersionColumn),
				fmt.Sprintf("ALTER TRIGGER %s ON %s RENAME TO %s;", pgx.Identifier{tr.name}.Sanitize(), t.Qualified(), pgx.Identifier{renamed}.Sanitize()))
		}
	}
	what := "other BEFORE INSERT/UPDATE row triggers of " + t.Name + ": none"
	if len(others) > 0 {
		what = "other BEFORE INSERT/UPDATE row triggers of " + t.Name + " (they fire in name order, bytewise): " + strings.Join(others, "; ")
	}
	if err := a.did(what, ""); err != nil {
		return err
	}
	return a.did("not guarded by any trigger: ALTER TABLE "+t.Name+" DISABLE TRIGGER (ALL, USER or "+TriggerName+
		"): writes made while it is disabled keep the version; the pipeline invalidates them by their change events alone", "")
}

func sameSet(a, b []string) bool {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}

func quoteAll(cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = pgx.Identifier{c}.Sanitize()
	}
	return out
}

func schemaOf(t catalog.Table) string { s, _, _ := catalog.SplitName(t.Name); return s }
func name(t catalog.Table) string     { _, n, _ := catalog.SplitName(t.Name); return n }
