package capture_test

import (
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A table keyed by a surrogate id: an UPDATE that moves a row to another
// (tenant, item) would carry no old key, so the old key's cached value would
// never be invalidated. Preflight refuses it, naming the fix; with REPLICA
// IDENTITY USING INDEX over (tenant_id, item_id) capture starts and the
// moved row's old key gets a hard delete (the applier purges it).
func TestPreflightReplicaIdentity(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartKafka(t)
	conn := connect(t, dsn)
	exec(t, conn, `CREATE TABLE catalog.surrogate (id bigserial PRIMARY KEY, tenant_id text NOT NULL, item_id text NOT NULL,
		version bigint NOT NULL, state text NOT NULL DEFAULT 'active')`)
	exec(t, conn, "CREATE UNIQUE INDEX surrogate_key ON catalog.surrogate (tenant_id, item_id)")
	exec(t, conn, "CREATE PUBLICATION surrogate FOR TABLE catalog.surrogate (id, tenant_id, item_id, version, state)")
	cfg := testConfig(t, dsn, k)
	cfg.Table, cfg.Publication = "catalog.surrogate", "surrogate"
	wantPreflight(t, runErr(t, cfg), "replica identity of catalog.surrogate is the primary key (id)",
		"does not include both tenant_id and item_id", "ALTER TABLE catalog.surrogate REPLICA IDENTITY USING INDEX")

	exec(t, conn, "ALTER TABLE catalog.surrogate REPLICA IDENTITY USING INDEX surrogate_key")
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.surrogate (tenant_id, item_id, version) VALUES ('t', 'old', 1)")
	exec(t, conn, "UPDATE catalog.surrogate SET item_id = 'new', version = 2 WHERE item_id = 'old'")
	recs := waitItem(t, k, cfg.Relay.Topic, "t", "new", 2)
	testenv.Eventually(t, 30*time.Second, "the old key deleted", func() error {
		for _, rec := range recs {
			if c, ok := rec.ev.(*schema.Change); ok && c.Item == "old" && c.Op == schema.OpDelete {
				return nil
			}
		}
		recs = readTopic(t, k.Brokers, cfg.Relay.Topic)
		return errorf("no delete of t/old among %d records", len(recs))
	})
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
}
