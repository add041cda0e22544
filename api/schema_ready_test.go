package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/migrations"
)

// Against a database tidemark migrate has not run on, serve is not ready
// (its /readyz says why) instead of ready with every request failing on a
// missing table; once migrated, it becomes ready without a restart.
func TestNotReadyUntilMigrated(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	e := newEnvDSN(t, pg.DSN(db))
	inst := e.instance(instOpts{})
	tel, err := telemetry.NewServer("127.0.0.1:0", prometheus.NewRegistry(), testenv.Logger(t), inst.srv.Ready)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tel.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	readyz := func() (int, string) {
		t.Helper()
		res, err := http.Get("http://" + tel.Addr() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, strings.TrimSpace(string(b))
	}
	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not migrated") || !strings.Contains(body, "tidemark migrate") {
		t.Fatalf("unmigrated database: /readyz %d %q, want 503 saying it is not migrated", code, body)
	}
	t.Logf("unmigrated: /readyz %d %s", code, body)
	if _, err := migrations.Up(testenv.Context(t, time.Minute), pg.DSN(db), testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "/readyz 200 after migrate", func() error {
		if code, body := readyz(); code != http.StatusOK {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	t.Logf("after migrate: /readyz 200")
}

// A display expression that reads another table would be served stale
// whatever capture does (only the catalog table's changes are captured):
// serve stays out of its Service saying what the expression reads; one
// that reads only the item's row is ready.
func TestNotReadyWhileDisplayReadsAnotherTable(t *testing.T) {
	e := newEnv(t)
	ctx := testenv.Context(t, time.Minute)
	if _, err := e.pool.Exec(ctx, `CREATE SCHEMA shop; CREATE TABLE shop.prices (item_id text, price numeric)`); err != nil {
		t.Fatal(err)
	}
	bad := e.instance(instOpts{cfg: func(c *Config) {
		c.Table.PayloadSQL = "jsonb_build_object('d', display, 'price', (SELECT p.price FROM shop.prices p WHERE p.item_id = items.item_id))"
	}})
	if err := bad.srv.Ready(ctx); !errors.Is(err, catalog.ErrDisplayReadsElsewhere) || !strings.Contains(err.Error(), "shop.prices") {
		t.Fatalf("Ready = %v, want ErrDisplayReadsElsewhere naming shop.prices", err)
	}
	// Another mapping: another namespace (one namespace is one mapping's).
	good := e.instance(instOpts{
		cfg:  func(c *Config) { c.Table.PayloadSQL = "jsonb_build_object('d', display, 'v', version)" },
		ccfg: func(c *cache.Config) { c.Namespace = "good" },
	})
	testenv.Eventually(t, 30*time.Second, "the process whose display reads only the row ready", func() error {
		return good.srv.Ready(ctx)
	})
}
