// Package migrations holds the catalog's SQL schema, embedded in the binary and
// applied by `tidemark migrate` with goose (a version table makes it idempotent).
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// VersionTable is where goose records applied migrations: in tidemark's own
// schema, so the migrate role needs no CREATE on public (revoked from PUBLIC
// since Postgres 15, and often on managed services).
const VersionTable = VersionSchema + ".schema_migrations"

// VersionSchema holds VersionTable.
const VersionSchema = "tidemark"

// legacyVersionTable is where releases before VersionTable recorded
// migrations (unqualified, so in the first schema on the search path).
const legacyVersionTable = "tidemark_schema_migrations"

// Result says what Up did.
type Result struct {
	Applied []int64 // versions applied by this run, in order
	Current int64   // schema version after the run
}

// Up applies every pending migration. Each migration runs in its own
// transaction, so a failure leaves the schema at the last good version and the
// error names the migration that failed.
func Up(ctx context.Context, dsn string, log *slog.Logger) (Result, error) {
	db, err := openDB(dsn)
	if err != nil {
		return Result{}, err
	}
	defer db.Close()
	if err := prepareVersionTable(ctx, db); err != nil {
		return Result{}, err
	}
	p, err := newProvider(db, VersionTable)
	if err != nil {
		return Result{}, err
	}
	if err := checkPartial(ctx, db, p); err != nil {
		return Result{}, err
	}
	results, err := p.Up(ctx)
	var res Result
	for _, r := range results {
		if r.Error == nil && !r.Empty {
			res.Applied = append(res.Applied, r.Source.Version)
			log.Info("applied migration", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
		}
	}
	if err != nil {
		var pe *goose.PartialError
		if errors.As(err, &pe) && pe.Failed != nil {
			return res, fmt.Errorf("migrations: %s failed (earlier migrations are applied, this one was rolled back): %w", pe.Failed.Source.Path, pe.Err)
		}
		return res, fmt.Errorf("migrations: up: %w", err)
	}
	if res.Current, err = p.GetDBVersion(ctx); err != nil {
		return res, fmt.Errorf("migrations: read version: %w", err)
	}
	return res, nil
}

// Status reports applied and pending migration versions.
func Status(ctx context.Context, dsn string) (applied, pending []int64, err error) {
	db, err := openDB(dsn)
	if err != nil {
		return nil, nil, err
	}
	defer db.Close()
	table := VersionTable
	var legacy bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NULL AND to_regclass($2) IS NOT NULL`, VersionTable, legacyVersionTable).Scan(&legacy); err != nil {
		return nil, nil, fmt.Errorf("migrations: find version table: %w", err)
	}
	if legacy {
		table = legacyVersionTable // Up moves it; Status only reads
	}
	p, err := newProvider(db, table)
	if err != nil {
		return nil, nil, err
	}
	st, err := p.Status(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("migrations: status: %w", err)
	}
	for _, s := range st {
		if s.State == goose.StateApplied {
			applied = append(applied, s.Source.Version)
		} else {
			pending = append(pending, s.Source.Version)
		}
	}
	return applied, pending, nil
}

// checkPartial refuses to migrate a database where objects of a migration that
// goose has not recorded already exist (someone ran the SQL by hand, or a
// different tool did): guessing would risk a half-owned schema.
func checkPartial(ctx context.Context, db *sql.DB, p *goose.Provider) error {
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrations: status: %w", err)
	}
	for _, s := range st {
		if s.State == goose.StateApplied || s.Source.Version != 1 {
			continue
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'catalog'`).Scan(&n); err != nil {
			return fmt.Errorf("migrations: inspect schema: %w", err)
		}
		if n > 0 {
			return errors.New("migrations: schema \"catalog\" exists but migration 1 is not recorded in " + VersionTable +
				": the database is partially set up by hand; drop schema catalog (and publication tidemark) or record the version, then rerun")
		}
	}
	return nil
}

func openDB(dsn string) (*sql.DB, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, errors.New("migrations: no Postgres DSN")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("migrations: parse DSN: %w", err)
	}
	return stdlib.OpenDB(*cfg), nil
}

// prepareVersionTable creates VersionSchema and moves a legacy version table
// into it, so an upgraded database keeps its recorded versions.
func prepareVersionTable(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA IF NOT EXISTS `+VersionSchema); err != nil {
		return fmt.Errorf("migrations: create schema %s (the migrate role needs CREATE on the database, or create the schema for it): %w", VersionSchema, err)
	}
	var legacy bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NULL AND to_regclass($2) IS NOT NULL`, VersionTable, legacyVersionTable).Scan(&legacy); err != nil {
		return fmt.Errorf("migrations: find version table: %w", err)
	}
	if !legacy {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrations: move version table: %w", err)
	}
	defer tx.Rollback()
	for _, q := range []string{
		`ALTER TABLE ` + legacyVersionTable + ` SET SCHEMA ` + VersionSchema,
		`ALTER TABLE ` + VersionSchema + `.` + legacyVersionTable + ` RENAME TO schema_migrations`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("migrations: move version table %s to %s: %w", legacyVersionTable, VersionTable, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrations: move version table: %w", err)
	}
	return nil
}

func newProvider(db *sql.DB, table string) (*goose.Provider, error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithTableName(table))
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}
