-- +goose Up
-- The durable record of each source pool's rollout settings (package
-- rollout): the cache tier holds the copy every serve process reads, with
-- its generation; this row is the same settings at the same or an older
-- generation, so a copy that the cache tier lost (a flush, a restore) is
-- found behind it and restored instead of every tenant silently returning to
-- the default. The final shape must equal migrations.OwnTablesSQL
-- (TestOwnTablesMatchMigrations).
CREATE TABLE tidemark.rollout_settings (
    pool       text        PRIMARY KEY,
    generation bigint      NOT NULL,
    settings   jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS tidemark.rollout_settings;
