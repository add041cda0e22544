package adopt_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/adopt"
	"github.com/tidemark/tidemark/lab/testenv"
)

// adopt makes the version trustworthy or says it cannot (issue 37): a
// nullable version column holding a NULL, a trigger of the operator's that
// sorts after the version trigger, and disabled and ENABLE REPLICA
// triggers are all reported, by the dry run too; the NULL row and the later
// trigger are left to the operator (ErrNotAdoptable, with the SQL). Once
// fixed, adopt adds NOT NULL and CHECK (rev > 0), and its trigger guards
// INSERT and fires under session_replication_role = replica.
func TestAdoptMakesTheVersionTrustworthy(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	pg.Exec(t, db, strings.Replace(shopSchema, "rev        bigint      NOT NULL DEFAULT 1", "rev        bigint      DEFAULT 1", 1))
	pg.Exec(t, db, `INSERT INTO shop.products (shop_id, sku, title, rev) VALUES ('s1', 'a', 'A', 1), ('s1', 'b', 'B', NULL);
		CREATE FUNCTION shop.touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.body := coalesce(NEW.body, '') || '.'; RETURN NEW; END $$;
		CREATE TRIGGER zzzz_touch BEFORE UPDATE ON shop.products FOR EACH ROW EXECUTE FUNCTION shop.touch();
		CREATE TRIGGER audit_off BEFORE INSERT ON shop.products FOR EACH ROW EXECUTE FUNCTION shop.touch();
		ALTER TABLE shop.products DISABLE TRIGGER audit_off;
		CREATE TRIGGER etl_only BEFORE UPDATE ON shop.products FOR EACH ROW EXECUTE FUNCTION shop.touch();
		ALTER TABLE shop.products ENABLE REPLICA TRIGGER etl_only;`)
	ctx := testenv.Context(t, time.Minute)
	log := testenv.Logger(t)
	cfg := adopt.DefaultConfig()
	cfg.PG, cfg.Table = pg.DSN(db), shopTable()
	dry := cfg
	dry.DryRun = true
	for _, c := range []adopt.Config{dry, cfg} {
		rep, err := adopt.Run(ctx, c, log)
		if !errors.Is(err, adopt.ErrNotAdoptable) {
			t.Fatalf("adopt (dry run %v) = %v, want ErrNotAdoptable", c.DryRun, err)
		}
		var all []string
		for _, s := range rep.Steps {
			all = append(all, s.What+" | "+s.SQL)
		}
		text := strings.Join(all, "\n")
		for _, want := range []string{"1 row(s) of shop.products have a NULL", "zzzz_touch (BEFORE UPDATE, enabled) sorts after " + adopt.TriggerName,
			"audit_off (BEFORE INSERT, DISABLED)", "etl_only (BEFORE UPDATE, ENABLE REPLICA", "BEFORE INSERT OR UPDATE", "ENABLE ALWAYS TRIGGER",
			"DISABLE TRIGGER"} {
			if !strings.Contains(text, want) {
				t.Errorf("adopt (dry run %v) does not say %q:\n%s", c.DryRun, want, text)
			}
		}
		if m := rep.Manual(); len(m) != 2 {
			t.Errorf("adopt (dry run %v) left %d steps to the operator, want 2 (the NULL row, the later trigger): %+v", c.DryRun, len(m), m)
		}
	}
	// The operator fixes the row and renames the trigger; adopt then adds
	// the constraints.
	pg.Exec(t, db, `UPDATE shop.products SET rev = 1 WHERE rev IS NULL; ALTER TRIGGER zzzz_touch ON shop.products RENAME TO tm_touch`)
	if _, err := adopt.Run(ctx, cfg, log); err != nil {
		t.Fatalf("adopt after the fixes: %v", err)
	}
	conn := pg.Connect(t, db)
	// With the trigger disabled (one statement list is one transaction:
	// the refusal rolls the DISABLE back too), the constraints refuse.
	for _, bad := range []string{`ALTER TABLE shop.products DISABLE TRIGGER ` + adopt.TriggerName + `; INSERT INTO shop.products (shop_id, sku, rev) VALUES ('s1', 'neg', -1)`,
		`ALTER TABLE shop.products DISABLE TRIGGER ` + adopt.TriggerName + `; UPDATE shop.products SET rev = NULL WHERE sku = 'a'`} {
		if _, err := conn.Exec(ctx, bad); err == nil {
			t.Fatalf("%s: accepted, want the NOT NULL or CHECK constraint to refuse it", bad)
		}
	}
	// INSERT is guarded: NULL and zero become 1.
	pg.Exec(t, db, `INSERT INTO shop.products (shop_id, sku, rev) VALUES ('s1', 'c', NULL), ('s1', 'd', 0)`)
	if v := rev(t, conn, "c"); v != 1 {
		t.Fatalf("rev of an INSERT with NULL = %d, want 1", v)
	}
	// A replica-role UPDATE of the payload gets the next version (ENABLE
	// ALWAYS), as does an UPDATE that sets it NULL.
	pg.Exec(t, db, `BEGIN; SET LOCAL session_replication_role = replica; UPDATE shop.products SET title = 'A2' WHERE sku = 'a'; COMMIT`)
	if v := rev(t, conn, "a"); v != 2 {
		t.Fatalf("rev after a replica-role UPDATE of the title = %d, want 2", v)
	}
	pg.Exec(t, db, `UPDATE shop.products SET rev = NULL, title = 'A3' WHERE sku = 'a'`)
	if v := rev(t, conn, "a"); v != 3 {
		t.Fatalf("rev after UPDATE SET rev = NULL = %d, want 3", v)
	}
}
