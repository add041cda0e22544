-- +goose Up
-- Every serve process registers here, on the source it reads, with its
-- source pool, the id of the pool's buckets in its Redis, and its budget
-- settings (package reader, sourcereaders.go): a source has one budget
-- whatever pools and Redis deployments read it, so each set of buckets
-- live on it admits its share of the lowest settings any live reader is
-- configured with.
-- The final shape must equal migrations.OwnTablesSQL
-- (TestOwnTablesMatchMigrations).
CREATE TABLE tidemark.source_readers (
    pool     text        NOT NULL,
    instance text        NOT NULL,
    buckets  text        NOT NULL,
    budget   text        NOT NULL,
    seen_at  timestamptz NOT NULL,
    PRIMARY KEY (pool, instance)
);
-- The serve processes' role is the one that records the rollout settings
-- (docs/postgres.md's grants): an upgrade grants it this table too, so a
-- new serve process is not held out of service by a grant no one ran.
-- +goose StatementBegin
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
             WHERE table_schema = 'tidemark' AND table_name = 'rollout_settings' AND privilege_type = 'INSERT'
               AND grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON tidemark.source_readers TO %I', r.grantee);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE IF EXISTS tidemark.source_readers;
