-- +goose Up
-- Every write must raise version: the pipeline carries key and version, and
-- an UPDATE that leaves version as it was (a DBA fixing a display by hand)
-- would leave every cached copy valid until its hard deadline, and the
-- watermark would keep extending it. This trigger raises it instead.
-- +goose StatementBegin
CREATE FUNCTION catalog.items_bump_version() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.version <= OLD.version THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER items_bump_version BEFORE UPDATE ON catalog.items
    FOR EACH ROW EXECUTE FUNCTION catalog.items_bump_version();

-- +goose Down
DROP TRIGGER IF EXISTS items_bump_version ON catalog.items;
DROP FUNCTION IF EXISTS catalog.items_bump_version();
