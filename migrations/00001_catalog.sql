-- +goose Up
CREATE SCHEMA IF NOT EXISTS catalog;

-- Items are never reused; a delete is a tombstone (state = 'deleted') whose
-- version still increments, so the pipeline can invalidate it like any change.
CREATE TABLE catalog.items (
    tenant_id  text        NOT NULL,
    item_id    text        NOT NULL,
    version    bigint      NOT NULL CHECK (version > 0),
    display    jsonb,
    state      text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'deleted')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, item_id)
);
CREATE INDEX items_tenant_updated ON catalog.items (tenant_id, updated_at, item_id);

-- The stored result of every write by (tenant, Idempotency-Key), so a retried
-- request returns the original answer.
CREATE TABLE catalog.requests (
    tenant_id    text        NOT NULL,
    request_id   text        NOT NULL,
    body_sha256  bytea       NOT NULL,
    status       integer     NOT NULL,
    response     jsonb       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, request_id)
);

-- API keys are stored only as SHA-256 hashes; the tenant comes from the key.
CREATE TABLE catalog.api_keys (
    key_sha256 bytea       PRIMARY KEY,
    tenant_id  text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Heartbeat row for roles that may not call pg_logical_emit_message: capture
-- updates it and reads the update back from the stream.
CREATE TABLE catalog.tidemark_heartbeat (
    id      integer     PRIMARY KEY CHECK (id = 1),
    beat_at timestamptz NOT NULL
);
INSERT INTO catalog.tidemark_heartbeat VALUES (1, now());

-- The pipeline needs key + version (+ state to tell tombstones), never the
-- payload: the column list leaves display out.
CREATE PUBLICATION tidemark FOR TABLE
    catalog.items (tenant_id, item_id, version, state),
    catalog.tidemark_heartbeat;

-- +goose Down
DROP PUBLICATION IF EXISTS tidemark;
DROP SCHEMA IF EXISTS catalog CASCADE;
