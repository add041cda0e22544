package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/schema"
)

// ErrPreflight marks a misconfiguration found before streaming; its message
// says how to fix it. Retrying does not help, so Run returns it at once.
var ErrPreflight = errors.New("capture: preflight")

// ErrNotSetUp marks what the schema's setup (tidemark migrate, or the
// operator's own for an adopted table) has not created yet: the
// publication. Run keeps retrying, not ready with this reason, instead of
// exiting: an install whose migration runs beside capture (a Helm hook, an
// init container) comes up without a restart.
var ErrNotSetUp = errors.New("capture: not set up")

func preflightError(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrPreflight, fmt.Sprintf(format, a...))
}

// slotInfo is the slot as pg_replication_slots shows it.
type slotInfo struct {
	exists    bool
	plugin    string
	database  string
	walStatus string
	confirmed schema.LSN
	active    bool
	failover  bool // Postgres 17+: synchronised to standbys, kept across a promotion
	// fp is what the publication streams of the table and the table's
	// definition, as the preflight found them valid.
	fp fingerprints
}

// preflight checks, in order, everything that would make streaming fail or
// silently capture nothing, each with one error that says how to fix it.
func (c *Capture) preflight(ctx context.Context, conn *pgx.Conn) (slotInfo, error) {
	var si slotInfo
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return si, fmt.Errorf("capture: preflight: read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return si, preflightError("wal_level is %q but logical replication needs \"logical\": run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) and restart Postgres", walLevel)
	}

	cfg := c.cfg
	nsp, tbl, _ := splitTable(cfg.Table)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_publication WHERE pubname = $1", cfg.Publication).Scan(&n); err != nil {
		return si, fmt.Errorf("capture: preflight: read publication: %w", err)
	}
	cols := []string{cfg.TenantColumn, cfg.ItemColumn, cfg.VersionColumn}
	if cfg.StateColumn != "" {
		cols = append(cols, cfg.StateColumn)
	}
	colList := strings.Join(cols, ", ")
	if n == 0 {
		return si, fmt.Errorf("%w: publication %q does not exist: run CREATE PUBLICATION %s FOR TABLE %s (%s) (tidemark migrate creates it for the default schema)", ErrNotSetUp, cfg.Publication, cfg.Publication, cfg.Table, colList)
	}
	var attnames []string
	err := conn.QueryRow(ctx, "SELECT attnames FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3", cfg.Publication, nsp, tbl).Scan(&attnames)
	if errors.Is(err, pgx.ErrNoRows) {
		return si, preflightError("publication %q does not include %s: run ALTER PUBLICATION %s ADD TABLE %s (%s)", cfg.Publication, cfg.Table, cfg.Publication, cfg.Table, colList)
	}
	if err != nil {
		return si, fmt.Errorf("capture: preflight: read publication tables: %w", err)
	}
	var missing []string
	for _, col := range cols {
		if !slices.Contains(attnames, col) {
			missing = append(missing, col)
		}
	}
	if len(missing) > 0 {
		return si, preflightError("publication %q publishes %s without column(s) %s: run ALTER PUBLICATION %s SET TABLE %s (%s)", cfg.Publication, cfg.Table, strings.Join(missing, ", "), cfg.Publication, cfg.Table, colList)
	}
	// Every kind of change and every row: a publication that leaves out
	// deletes (publish = 'insert, update') or rows (a row filter) streams
	// nothing for them while heartbeats go on, and the watermark would
	// vouch for values they replaced.
	var ops string
	var filter *string
	if err := conn.QueryRow(ctx, `SELECT concat_ws(',', CASE WHEN NOT p.pubinsert THEN 'insert' END, CASE WHEN NOT p.pubupdate THEN 'update' END,
			CASE WHEN NOT p.pubdelete THEN 'delete' END, CASE WHEN NOT p.pubtruncate THEN 'truncate' END), t.rowfilter
		FROM pg_publication p JOIN pg_publication_tables t ON t.pubname = p.pubname
		WHERE p.pubname = $1 AND t.schemaname = $2 AND t.tablename = $3`, cfg.Publication, nsp, tbl).Scan(&ops, &filter); err != nil {
		return si, fmt.Errorf("capture: preflight: read publication options: %w", err)
	}
	if ops != "" {
		return si, preflightError("publication %q does not publish %s: every change must invalidate; run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')", cfg.Publication, ops, cfg.Publication)
	}
	if filter != nil {
		return si, preflightError("publication %q publishes only the rows of %s where %s: every row's changes must invalidate; run ALTER PUBLICATION %s SET TABLE %s (%s)", cfg.Publication, cfg.Table, *filter, cfg.Publication, cfg.Table, colList)
	}
	if si.fp, err = readFingerprints(ctx, conn, cfg.Publication, cfg.Table); err != nil {
		return si, err
	}

	if err := checkReplicaIdentity(ctx, conn, cfg, nsp, tbl); err != nil {
		return si, err
	}

	var confirmed *string
	var walStatus *string
	err = conn.QueryRow(ctx, `SELECT plugin, slot_type, database, wal_status, confirmed_flush_lsn::text, active
		FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&si.plugin, new(string), &si.database, &walStatus, &confirmed, &si.active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if !cfg.CreateSlot {
			return si, preflightError("replication slot %q does not exist: create it with SELECT pg_create_logical_replication_slot('%s', 'pgoutput'), or let capture create it", cfg.Slot, cfg.Slot)
		}
		return si, nil
	case err != nil:
		return si, fmt.Errorf("capture: preflight: read slot: %w", err)
	}
	si.exists = true
	if conn.PgConn().ParameterStatus("server_version") >= "17" {
		if err := conn.QueryRow(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&si.failover); err != nil {
			return si, fmt.Errorf("capture: preflight: read slot failover: %w", err)
		}
	}
	if walStatus != nil {
		si.walStatus = *walStatus
	}
	if confirmed != nil {
		if si.confirmed, err = schema.ParseLSN(*confirmed); err != nil {
			return si, fmt.Errorf("capture: preflight: slot confirmed_flush_lsn: %w", err)
		}
	}
	if si.plugin != "pgoutput" {
		return si, preflightError("replication slot %q exists with plugin %q, but capture needs pgoutput: drop it with SELECT pg_drop_replication_slot('%s') or choose another --slot", cfg.Slot, si.plugin, cfg.Slot)
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return si, fmt.Errorf("capture: preflight: read database: %w", err)
	}
	if si.database != db {
		return si, preflightError("replication slot %q belongs to database %q, not %q: choose another --slot", cfg.Slot, si.database, db)
	}
	return si, nil
}

// checkReplicaIdentity refuses a table whose replica identity does not cover
// the tenant and item columns. pgoutput sends the old key of an UPDATE only
// as its replica identity: with a surrogate primary key, an UPDATE that moves
// a row to another (tenant, item) carries no old tenant and item, so the old
// key would never be invalidated.
func checkReplicaIdentity(ctx context.Context, conn *pgx.Conn, cfg Config, nsp, tbl string) error {
	var oid uint32
	var ident string
	err := conn.QueryRow(ctx, `SELECT c.oid, c.relreplident::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, nsp, tbl).Scan(&oid, &ident)
	if err != nil {
		return fmt.Errorf("capture: preflight: read replica identity of %s: %w", cfg.Table, err)
	}
	fix := fmt.Sprintf("run ALTER TABLE %s REPLICA IDENTITY USING INDEX <a unique index on (%s, %s)>, or make (%s, %s) the primary key, or ALTER TABLE %s REPLICA IDENTITY FULL",
		cfg.Table, cfg.TenantColumn, cfg.ItemColumn, cfg.TenantColumn, cfg.ItemColumn, cfg.Table)
	var which, cond string
	switch ident {
	case "f":
		return nil // the whole old row
	case "n":
		return preflightError("replica identity of %s is NOTHING, so an UPDATE that changes %s or %s carries no old key: %s", cfg.Table, cfg.TenantColumn, cfg.ItemColumn, fix)
	case "d":
		which, cond = "the primary key", "i.indisprimary"
	case "i":
		which, cond = "the index", "i.indisreplident"
	default:
		return preflightError("replica identity of %s is %q, which capture does not know: %s", cfg.Table, ident, fix)
	}
	var cols []string
	err = conn.QueryRow(ctx, `SELECT coalesce(array_agg(a.attname::text ORDER BY a.attnum), '{}') FROM pg_index i
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1 AND `+cond, oid).Scan(&cols)
	if err != nil {
		return fmt.Errorf("capture: preflight: read replica identity columns of %s: %w", cfg.Table, err)
	}
	if len(cols) == 0 {
		return preflightError("replica identity of %s is %s, but the table has none, so an UPDATE that changes %s or %s carries no old key: %s", cfg.Table, which, cfg.TenantColumn, cfg.ItemColumn, fix)
	}
	if !slices.Contains(cols, cfg.TenantColumn) || !slices.Contains(cols, cfg.ItemColumn) {
		return preflightError("replica identity of %s is %s (%s), which does not include both %s and %s, so an UPDATE that changes them carries no old key: %s",
			cfg.Table, which, strings.Join(cols, ", "), cfg.TenantColumn, cfg.ItemColumn, fix)
	}
	return nil
}

// replicationRefused turns the server's refusal of a replication connection
// (or of a slot call) into one preflight error naming every way to grant it.
// Capture checks by doing, not by reading pg_roles: managed services grant
// replication through role membership (rds_replication) that rolreplication
// does not show.
func replicationRefused(role string, err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || (pe.Code != "42501" && pe.Code != "28000") {
		return nil
	}
	r := pgx.Identifier{role}.Sanitize()
	return preflightError("role %q may not use logical replication (%s): as a superuser run ALTER ROLE %s WITH REPLICATION; "+
		"on Amazon RDS/Aurora GRANT rds_replication TO %s (and rds.logical_replication = 1); on Cloud SQL ALTER USER %s WITH REPLICATION (and cloudsql.logical_decoding = on); "+
		"on Azure Database for PostgreSQL ALTER ROLE %s WITH REPLICATION (and wal_level = logical); pg_hba.conf must also allow it a replication connection (docs/postgres.md)",
		role, pe.Message, r, r, r, r)
}

// publicationSQL fingerprints what the publication ($1) streams of the
// table ($2.$3), from the system catalogs (no privilege on the table's
// schema needed): the publication (its oid and options), the table's oid, each
// catalog row that makes the table a member (pg_publication_rel, or its
// schema's pg_publication_namespace), the columns and row filter it is
// published with, and the table's replica identity (an UPDATE's old key is
// sent only as the replica identity: one that no longer covers the tenant
// and item leaves a moved row's old key uninvalidated). A member dropped and added again has a new row, so a new
// fingerprint: the changes made between the two were never streamed.
// Empty when the publication does not exist.
const publicationSQL = `WITH rel AS (
    SELECT c.oid, c.relnamespace FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $2 AND c.relname = $3
)
SELECT coalesce((SELECT ROW(p.oid, p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, p.pubviaroot, p.puballtables, rel.oid,
		(SELECT array_agg(pr.oid ORDER BY pr.oid) FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = rel.oid),
		(SELECT array_agg(pn.oid ORDER BY pn.oid) FROM pg_publication_namespace pn WHERE pn.pnpubid = p.oid AND pn.pnnspid = rel.relnamespace),
		(SELECT ROW(t.attnames, t.rowfilter) FROM pg_publication_tables t WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3),
		(SELECT c.relreplident FROM pg_class c WHERE c.oid = rel.oid),
		(SELECT array_agg(i.indexrelid ORDER BY i.indexrelid) FROM pg_index i WHERE i.indrelid = rel.oid AND i.indisreplident))::text
	FROM pg_publication p LEFT JOIN rel ON true WHERE p.pubname = $1), '')`

// tableSQL fingerprints the table's definition ($1.$2), what makes its
// values besides its rows: pgoutput streams no change for a rewrite
// (ALTER COLUMN ... TYPE ... USING changes every row's value in place), a
// column added with a default, an enum label renamed, or a partition
// attached or detached with its rows, or a row-level security policy
// that changes what serve's role reads, while heartbeats go on. Each
// relation of the table's partition tree with its file (a rewrite gives a
// new one; so do TRUNCATE, VACUUM FULL and CLUSTER, which then reset the
// cache too: when unsure, drop) and its row security, its policies, its
// columns with their types, and the labels of the enum types among them.
// Empty when the table does not exist.
const tableSQL = `WITH tree AS (
    SELECT c.oid AS relid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2
    UNION
    SELECT t.relid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace, pg_partition_tree(c.oid) t WHERE n.nspname = $1 AND c.relname = $2
), cols AS (
    SELECT a.* FROM tree JOIN pg_attribute a ON a.attrelid = tree.relid WHERE a.attnum > 0
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM tree) THEN ROW(
    (SELECT array_agg(ROW(c.oid, c.relfilenode, c.relkind, c.relpersistence, c.relrowsecurity, c.relforcerowsecurity)::text ORDER BY c.oid)
        FROM tree JOIN pg_class c ON c.oid = tree.relid),
    (SELECT array_agg(ROW(p.oid, p.polname, p.polcmd, p.polpermissive, p.polroles, pg_get_expr(p.polqual, p.polrelid))::text ORDER BY p.oid)
        FROM tree JOIN pg_policy p ON p.polrelid = tree.relid),
    (SELECT array_agg(ROW(a.attrelid, a.attnum, a.attname, a.atttypid, a.atttypmod, a.attcollation, a.attisdropped, a.attgenerated)::text
        ORDER BY a.attrelid, a.attnum) FROM cols a),
    (SELECT array_agg(ROW(e.enumtypid, e.enumsortorder, e.enumlabel)::text ORDER BY e.enumtypid, e.enumsortorder)
        FROM pg_enum e WHERE e.enumtypid IN (SELECT atttypid FROM cols WHERE NOT attisdropped)))::text ELSE '' END`

// fingerprints are what capture checks the source against before every
// heartbeat and records in the state topic.
type fingerprints struct {
	publication string // publicationSQL
	table       string // tableSQL
}

// readFingerprints reads publicationSQL and tableSQL, in one round trip.
func readFingerprints(ctx context.Context, conn *pgx.Conn, publication, table string) (fingerprints, error) {
	var fp fingerprints
	nsp, tbl, _ := splitTable(table)
	b := &pgx.Batch{}
	b.Queue(publicationSQL, publication, nsp, tbl).QueryRow(func(r pgx.Row) error { return r.Scan(&fp.publication) })
	b.Queue(tableSQL, nsp, tbl).QueryRow(func(r pgx.Row) error { return r.Scan(&fp.table) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return fp, fmt.Errorf("capture: read publication %q and the definition of %s: %w", publication, table, err)
	}
	return fp, nil
}
