package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what Check reads the database through: a pgx connection or
// pool.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrSchemaBehind is the class of Check's verdicts that the database lacks
// what this binary needs: a process stays out of service (not ready) until
// the schema is migrated, instead of answering every request with an error.
var ErrSchemaBehind = errors.New("schema behind this binary")

// Latest is the newest migration embedded in this binary: the schema
// version it needs.
func Latest() int64 {
	var latest int64
	names, _ := fs.Glob(files, "*.sql")
	for _, n := range names {
		v, err := strconv.ParseInt(strings.SplitN(path.Base(n), "_", 2)[0], 10, 64)
		if err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// Check reports nil when the database holds the schema this binary needs:
// goose's VersionTable records Latest (or a newer version, from a newer
// binary migrating first), or, for a database set up by tidemark adopt
// (tidemark's own tables without goose's table), those tables exist. A
// missing or older schema is an error wrapping ErrSchemaBehind that says
// what was found; any other error is a failed read (the database did not
// answer) and says nothing of the schema.
func Check(ctx context.Context, q Querier) error {
	var versioned, legacy, own bool
	err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL,
		to_regclass('tidemark.api_keys') IS NOT NULL AND to_regclass('tidemark.requests') IS NOT NULL AND to_regclass($3) IS NOT NULL
		AND to_regclass($4) IS NOT NULL AND to_regclass($5) IS NOT NULL AND to_regclass($6) IS NOT NULL`,
		VersionTable, legacyVersionTable, HeartbeatTable, RolloutTable, SourceReadersTable, CaptureSlotsTable).Scan(&versioned, &legacy, &own)
	if err != nil {
		return fmt.Errorf("migrations: read the schema version: %w", err)
	}
	latest := Latest()
	switch {
	case legacy && !versioned:
		return fmt.Errorf("migrations: %w: versions are recorded in %s, from a release before %s; run tidemark migrate", ErrSchemaBehind, legacyVersionTable, VersionTable)
	case !versioned && own:
		return nil // adopted: tidemark adopt created the own tables in their final shape
	case !versioned:
		return fmt.Errorf("migrations: %w: the database is not migrated (no %s; tidemark's tables are missing); run tidemark migrate (schema version %d), or tidemark adopt again for an adopted table", ErrSchemaBehind, VersionTable, latest)
	}
	var current int64
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+VersionTable+` WHERE is_applied`).Scan(&current); err != nil {
		return fmt.Errorf("migrations: read the schema version: %w", err)
	}
	if current < latest {
		return fmt.Errorf("migrations: %w: the schema is at version %d, this binary needs %d; run tidemark migrate", ErrSchemaBehind, current, latest)
	}
	return nil
}
