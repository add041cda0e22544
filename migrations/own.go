package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OwnTablesSQL creates tidemark's own tables (schema tidemark: API keys,
// idempotency records, the heartbeat row, the rollout settings' record)
// where they are missing, for a database whose catalog table the operator
// already has (tidemark adopt).
// The shape is the one the numbered migrations end at; a migrated database
// and one set up by OwnTablesSQL are checked equal by
// TestOwnTablesMatchMigrations.
const OwnTablesSQL = `
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
`

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
