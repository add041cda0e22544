package capture_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
)

// runErr runs capture and returns its (preflight) error.
func runErr(t *testing.T, cfg capture.Config) error {
	t.Helper()
	c, err := capture.New(cfg, capture.Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = c.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not fail fast (still retrying after 30s)")
	}
	return err
}

func wantPreflight(t *testing.T, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, capture.ErrPreflight) {
		t.Fatalf("want a preflight error, got %v", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestPreflightWalLevel(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t, testenv.PGConf("wal_level", "replica"))
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartKafka(t)
	wantPreflight(t, runErr(t, testConfig(t, dsn, k)), `wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical", "restart Postgres")
}

func TestPreflightErrors(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	k := testenv.StartKafka(t)

	t.Run("role lacks REPLICATION", func(t *testing.T) {
		dsn := pg.MigratedDatabase(t)
		role := testenv.Unique(t, "r")
		pg.Exec(t, "postgres", "CREATE ROLE "+role+" LOGIN")
		t.Cleanup(func() {
			pg.Exec(t, "postgres", "DROP OWNED BY "+role+" CASCADE")
		})
		cfg := testConfig(t, strings.Replace(dsn, "postgres@", role+"@", 1), k)
		wantPreflight(t, runErr(t, cfg), "may not use logical replication", `ALTER ROLE "`+role+`" WITH REPLICATION`, "GRANT rds_replication TO")
	})
	t.Run("publication without the table", func(t *testing.T) {
		dsn := pg.MigratedDatabase(t)
		exec(t, connect(t, dsn), "ALTER PUBLICATION tidemark DROP TABLE catalog.items")
		wantPreflight(t, runErr(t, testConfig(t, dsn, k)), `publication "tidemark" does not include catalog.items`, "ALTER PUBLICATION tidemark ADD TABLE catalog.items")
	})
	t.Run("publication without the version column", func(t *testing.T) {
		dsn := pg.MigratedDatabase(t)
		exec(t, connect(t, dsn), "ALTER PUBLICATION tidemark SET TABLE catalog.items (tenant_id, item_id, state)")
		wantPreflight(t, runErr(t, testConfig(t, dsn, k)), "without column(s) version")
	})
	t.Run("publication without deletes", func(t *testing.T) {
		dsn := pg.MigratedDatabase(t)
		exec(t, connect(t, dsn), "ALTER PUBLICATION tidemark SET (publish = 'insert, update')")
		wantPreflight(t, runErr(t, testConfig(t, dsn, k)), `publication "tidemark" does not publish delete,truncate`, "publish = 'insert, update, delete, truncate'")
	})
	t.Run("publication with a row filter", func(t *testing.T) {
		dsn := pg.MigratedDatabase(t)
		exec(t, connect(t, dsn), "ALTER PUBLICATION tidemark SET TABLE catalog.items (tenant_id, item_id, version, state) WHERE (tenant_id <> 'x')")
		wantPreflight(t, runErr(t, testConfig(t, dsn, k)), `publishes only the rows of catalog.items where`, "ALTER PUBLICATION tidemark SET TABLE catalog.items (")
	})
	t.Run("slot with another plugin", func(t *testing.T) {
		dsn := pg.MigratedDatabase(t)
		cfg := testConfig(t, dsn, k)
		exec(t, connect(t, dsn), "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", cfg.Slot)
		wantPreflight(t, runErr(t, cfg), `slot "`+cfg.Slot+`" exists with plugin "test_decoding"`, "pg_drop_replication_slot('"+cfg.Slot+"')")
	})
	t.Run("slot missing and creation off", func(t *testing.T) {
		dsn := pg.MigratedDatabase(t)
		cfg := testConfig(t, dsn, k)
		cfg.CreateSlot = false
		wantPreflight(t, runErr(t, cfg), `slot "`+cfg.Slot+`" does not exist`, "pg_create_logical_replication_slot")
	})
}

func TestConfigValidateNamesEveryFlag(t *testing.T) {
	cfg := capture.DefaultConfig()
	cfg.Slot = "Bad-Slot"
	cfg.Heartbeat = 0
	cfg.Table = "items"
	err := cfg.Validate()
	for _, flag := range []string{"PG:", "Relay.Brokers:", "Slot:", "Heartbeat:", "Table:"} {
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("Validate() = %v, want it to name %s", err, flag)
		}
	}
}

// Without its publication (the migration has not run yet: a Helm hook or an
// init container beside it), capture does not exit: it is not ready, saying
// what to create, and streams once the publication exists.
func TestWaitsForThePublication(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, _, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	exec(t, conn, "DROP PUBLICATION tidemark")
	c, err := capture.New(cfg, capture.Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	exited := make(chan struct{})
	go func() { runErr = c.Run(ctx); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	testenv.Eventually(t, 30*time.Second, "capture not ready, naming the publication", func() error {
		select {
		case <-exited:
			t.Fatalf("capture exited without its publication: %v", runErr)
		default:
		}
		err := c.Ready(context.Background())
		if err == nil || !strings.Contains(err.Error(), `publication "tidemark" does not exist`) ||
			!strings.Contains(err.Error(), "CREATE PUBLICATION tidemark FOR TABLE catalog.items (tenant_id, item_id, version, state)") {
			return fmt.Errorf("Ready = %v", err)
		}
		return nil
	})
	t.Logf("no publication: Ready = %v", c.Ready(context.Background()))
	exec(t, conn, "CREATE PUBLICATION tidemark FOR TABLE catalog.items (tenant_id, item_id, version, state)")
	testenv.Eventually(t, 30*time.Second, "capture ready once the publication exists", func() error { return c.Ready(context.Background()) })
}

// A heartbeat interval longer than promise.MaxHeartbeat is refused: on an
// idle catalog the watermark ages by it, and a healthy pipeline would then
// flap status's AT RISK and the alert that reads the same level.
func TestConfigRefusesAHeartbeatAHealthyPipelineWouldWarnOn(t *testing.T) {
	cfg := capture.DefaultConfig()
	cfg.PG, cfg.Relay.Brokers = "postgres://x", []string{"127.0.0.1:9092"}
	for _, c := range []struct {
		every time.Duration
		ok    bool
	}{{promise.MaxHeartbeat, true}, {time.Second, true}, {promise.MaxHeartbeat + time.Millisecond, false}, {10 * time.Second, false}} {
		cfg.Heartbeat = c.every
		err := cfg.Validate()
		if c.ok && err != nil {
			t.Errorf("heartbeat %s: %v, want accepted", c.every, err)
		}
		if !c.ok && (err == nil || !strings.Contains(err.Error(), "Heartbeat:") || !strings.Contains(err.Error(), promise.MaxHeartbeat.String())) {
			t.Errorf("heartbeat %s: %v, want Heartbeat refused naming %s", c.every, err, promise.MaxHeartbeat)
		}
	}
}
