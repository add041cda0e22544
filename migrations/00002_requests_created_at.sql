-- +goose Up
-- Idempotency records expire: serve deletes rows older than the retention in
-- small batches, found through this index.
CREATE INDEX requests_created_at ON catalog.requests (created_at);

-- +goose Down
DROP INDEX IF EXISTS catalog.requests_created_at;
