-- +goose Up
-- tidemark's own tables live in a schema of their own, never beside the
-- operator's catalog tables (an adopted table is in the operator's schema;
-- catalog.items is only the table tidemark migrate creates for a new
-- catalog). Publications follow a table across SET SCHEMA. The final shape
-- must equal migrations.OwnTablesSQL (TestOwnTablesMatchMigrations).
CREATE SCHEMA IF NOT EXISTS tidemark;
ALTER TABLE catalog.api_keys SET SCHEMA tidemark;
ALTER TABLE catalog.requests SET SCHEMA tidemark;
ALTER TABLE catalog.tidemark_heartbeat SET SCHEMA tidemark;
ALTER TABLE tidemark.tidemark_heartbeat RENAME TO heartbeat;
ALTER INDEX tidemark.tidemark_heartbeat_pkey RENAME TO heartbeat_pkey;

-- +goose Down
ALTER INDEX tidemark.heartbeat_pkey RENAME TO tidemark_heartbeat_pkey;
ALTER TABLE tidemark.heartbeat RENAME TO tidemark_heartbeat;
ALTER TABLE tidemark.tidemark_heartbeat SET SCHEMA catalog;
ALTER TABLE tidemark.requests SET SCHEMA catalog;
ALTER TABLE tidemark.api_keys SET SCHEMA catalog;
