-- +goose Up
-- Each replication slot streams to one topic (package capture,
-- slotclaim.go): a capture claims its slot for its topic before it streams,
-- and refuses a slot that exists and is claimed for another topic, so a
-- second deployment left on the default slot cannot take the slot over
-- when the first one's capture restarts. A claim holds while its slot
-- exists: a dropped slot is claimed anew by the next capture.
-- The final shape must equal migrations.OwnTablesSQL
-- (TestOwnTablesMatchMigrations).
CREATE TABLE tidemark.capture_slots (
    slot       text        PRIMARY KEY,
    topic      text        NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
-- Capture's role is the one that updates the heartbeat row
-- (docs/postgres.md's grants): an upgrade grants it this table too, so a
-- new capture is not held out of streaming by a grant no one ran.
-- +goose StatementBegin
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
             WHERE table_schema = 'tidemark' AND table_name = 'heartbeat' AND privilege_type = 'UPDATE'
               AND grantee <> current_user
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE ON tidemark.capture_slots TO %I', r.grantee);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE IF EXISTS tidemark.capture_slots;
