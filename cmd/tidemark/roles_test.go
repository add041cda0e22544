package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/lab/testenv"
)

// sqlBlock returns the fenced ```sql <name> block of docs/postgres.md, so the
// test runs exactly what the operator is told to run.
func sqlBlock(t *testing.T, name string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/postgres.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sql " + name + "\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatalf("docs/postgres.md has no ```sql %s block", name)
	}
	return string(m[1])
}

// Every command runs as its least-privilege role from docs/postgres.md on a
// server where none of them is a superuser or owns the database.
func TestLeastPrivilegeRoles(t *testing.T) {
	pg := testenv.StartPostgres(t)
	pg.Exec(t, "postgres", "CREATE DATABASE catalog")
	pg.Exec(t, "catalog", sqlBlock(t, "admin"))
	dsn := func(role string) string {
		return fmt.Sprintf("postgres://%s@127.0.0.1:%d/catalog?sslmode=disable", role, pg.Port)
	}
	for _, role := range []string{"tidemark_migrate", "tidemark_capture", "tidemark_serve", "tidemark_apikey"} {
		var super bool
		if err := pg.Connect(t, "catalog").QueryRow(context.Background(), "SELECT rolsuper FROM pg_roles WHERE rolname = $1", role).Scan(&super); err != nil || super {
			t.Fatalf("role %s: superuser %v, err %v", role, super, err)
		}
	}

	if code, out, errs := runCLI(t, "migrate", "--pg", dsn("tidemark_migrate")); code != 0 {
		t.Fatalf("migrate as tidemark_migrate: exit %d\n%s\n%s", code, out, errs)
	}
	ctx := testenv.Context(t, 180*time.Second)
	mc, err := pgx.Connect(ctx, dsn("tidemark_migrate"))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close(context.Background())
	if _, err := mc.Exec(ctx, sqlBlock(t, "grants")); err != nil {
		t.Fatalf("grants as tidemark_migrate: %v", err)
	}
	var versionTable string
	if err := mc.QueryRow(ctx, "SELECT to_regclass('tidemark.schema_migrations')::text").Scan(&versionTable); err != nil || versionTable == "" {
		t.Fatalf("goose's version table is not tidemark.schema_migrations: %q %v", versionTable, err)
	}

	code, out, errs := runCLI(t, "apikey", "create", "--pg", dsn("tidemark_apikey"), "--tenant", "acme")
	if code != 0 {
		t.Fatalf("apikey create as tidemark_apikey: exit %d\n%s\n%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	key := lines[len(lines)-1]

	k := testenv.StartKafka(t)
	r := testenv.StartRedis(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan string, 2)
	start := func(args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o, e bytes.Buffer
			if code := run(rctx, args, &o, &e); code != 0 && rctx.Err() == nil {
				errc <- fmt.Sprintf("%s exited %d: %s", args[0], code, e.String())
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	start("capture", "--pg", dsn("tidemark_capture"), "--kafka", k.BrokerList(), "--partitions", "2", "--metrics-addr", "")
	start("serve", "--pg", dsn("tidemark_serve"), "--redis", r.URL(), "--addr", addr, "--metrics-addr", "")

	pc := pg.Connect(t, "catalog")
	testenv.Eventually(t, 120*time.Second, "capture (as tidemark_capture) streams from its slot and its heartbeat reaches the slot", func() error {
		select {
		case e := <-errc:
			t.Fatal(e)
		default:
		}
		var active bool
		var lag int64
		err := pc.QueryRow(ctx, `SELECT active, pg_current_wal_lsn() - confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'tidemark'`).Scan(&active, &lag)
		if err != nil || !active {
			return fmt.Errorf("slot tidemark: active %v, err %v", active, err)
		}
		return nil
	})
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		if method != "GET" {
			req.Header.Set("Idempotency-Key", method+path)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Eventually(t, 60*time.Second, "serve (as tidemark_serve) creates an item", func() error {
		select {
		case e := <-errc:
			t.Fatal(e)
		default:
		}
		if c, b := do("POST", "/v1/catalog/items", `{"item_id":"i","display":{"n":1}}`); c != 201 && c != 409 {
			return fmt.Errorf("POST: %d %s", c, b)
		}
		return nil
	})
	if c, b := do("GET", "/v1/catalog/items/i", ""); c != 200 {
		t.Fatalf("GET as tidemark_serve: %d %s", c, b)
	}
	if c, b := do("PATCH", "/v1/catalog/items/i", `{"expected_version":1,"display":{"n":2}}`); c != 200 {
		t.Fatalf("PATCH as tidemark_serve: %d %s", c, b)
	}
	// tidemark rollout, run with the serve role's DSN, records the settings
	// in Postgres (tidemark.rollout_settings's grant) and reads them back.
	if code, out, errs := runCLI(t, "rollout", "set", "shadow", "--tenant", "acme", "--pg", dsn("tidemark_serve"), "--redis", r.URL()); code != 0 {
		t.Fatalf("rollout set as tidemark_serve: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := runCLI(t, "rollout", "status", "--pg", dsn("tidemark_serve"), "--redis", r.URL()); code != 0 || !strings.Contains(out, "shadow") || strings.Contains(out, "LOST") {
		t.Fatalf("rollout status as tidemark_serve: exit %d\n%s\n%s", code, out, errs)
	}
	// Capture has read past the writes (and its heartbeat, as the role may
	// send it, keeps confirming the slot).
	var written string
	if err := pc.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&written); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "capture confirms the slot past serve's writes", func() error {
		var past bool
		if err := pc.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = 'tidemark'", written).Scan(&past); err != nil || !past {
			return fmt.Errorf("confirmed_flush_lsn not past %s (err %v)", written, err)
		}
		return nil
	})
}
