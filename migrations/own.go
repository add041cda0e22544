package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OwnTablesSQL creates tidemark's own tables (schema tidemark: API keys,
// idempotency records, the heartbeat row, the rollout settings' record, the source's readers,
// the capture slots' claims)
// where they are missing, for a database whose catalog table the operator
// already has (tidemark adopt).
// The shape is the one the numbered migrations end at; a migrated database
// and one set up by OwnTablesSQL are checked equal by
// TestOwnTablesMatchMigrations.
var OwnTablesSQL = `
CREATE SCHEMA IF NOT EXISTS tidemark;
CREATE TABLE IF NOT EXISTS tidemark.requests (
    tenant_id    text        NOT NULL,
    request_id   text        NOT NULL,
    body_sha256  bytea       NOT NULL,
    status       integer     NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_id)
);
CREATE INDEX IF NOT EXISTS requests_created_at ON tidemark.requests (created_at);
CREATE TABLE IF NOT EXISTS tidemark.api_keys (
    key_sha256 bytea       PRIMARY KEY,
    tenant_id  text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS tidemark.heartbeat (
    id      integer     PRIMARY KEY CHECK (id = 1),
    beat_at timestamptz NOT NULL
);
INSERT INTO tidemark.heartbeat VALUES (1, now()) ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS tidemark.rollout_settings (
    pool       text        PRIMARY KEY,
    generation bigint      NOT NULL,
    settings   jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS tidemark.source_readers (
    pool     text        NOT NULL,
    instance text        NOT NULL,
    buckets  text        NOT NULL,
    budget   text        NOT NULL,
    seen_at  timestamptz NOT NULL,
    PRIMARY KEY (pool, instance)
);
CREATE TABLE IF NOT EXISTS tidemark.capture_slots (
    slot       text        PRIMARY KEY,
    topic      text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
` +
	// As migrations 00006 and 00007 do: a database migrated or adopted
	// before a table existed needs no grant of its own.
	grantToHoldersOf("source_readers", "SELECT, INSERT, UPDATE, DELETE", "rollout_settings", "INSERT") + // the serve role, by docs/postgres.md
	grantToHoldersOf("capture_slots", "SELECT, INSERT, UPDATE", "heartbeat", "UPDATE") // the capture role

// grantToHoldersOf grants privileges on tidemark.<table> to every role
// (but the one running it) that holds privilege on tidemark.<holding>: a
// new table goes to the role that uses its neighbour, whatever the
// operator named it.
func grantToHoldersOf(table, privileges, holding, privilege string) string {
	return fmt.Sprintf(`
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
             WHERE table_schema = 'tidemark' AND table_name = '%s' AND privilege_type = '%s'
               AND grantee <> current_user
    LOOP
        EXECUTE format('GRANT %s ON tidemark.%s TO %%I', r.grantee);
    END LOOP;
END
$$;
`, holding, privilege, privileges, table)
}

// HeartbeatTable is tidemark's heartbeat row table (capture's row mode).
const HeartbeatTable = "tidemark.heartbeat"

// EnsureOwnTables runs OwnTablesSQL: idempotent.
func EnsureOwnTables(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, OwnTablesSQL); err != nil {
		return fmt.Errorf("migrations: create tidemark's own tables: %w", err)
	}
	return nil
}

// RolloutTable is the durable record of the rollout settings (package
// rollout).
const RolloutTable = "tidemark.rollout_settings"

// SourceReadersTable is where serve processes register on their source
// (package reader).
const SourceReadersTable = "tidemark.source_readers"

// CaptureSlotsTable is where captures claim their slot for their topic
// (package capture).
const CaptureSlotsTable = "tidemark.capture_slots"
