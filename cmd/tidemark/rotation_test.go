package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/migrations"
)

// A rotated password (a Vault agent or a Kubernetes Secret update rewriting
// TIDEMARK_PG_FILE and TIDEMARK_REDIS_FILE) is picked up by serve's and
// capture's next connections: the role's password changes on the servers,
// the files are rewritten, every connection is dropped, and both processes
// reconnect with the new password without a restart.
func TestRotatedSecretFilesArePickedUpOnReconnect(t *testing.T) {
	ctx := testenv.Context(t, 240*time.Second)
	pg := testenv.StartPostgres(t)
	pg.Exec(t, "postgres", "CREATE DATABASE catalog")
	pg.Exec(t, "postgres", "CREATE ROLE tm_rot LOGIN SUPERUSER REPLICATION PASSWORD 'pg-old'")
	// The test server trusts every local connection; make tm_rot's
	// password count (first matching line wins).
	hba := filepath.Join(pg.Dir, "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	rules := "host all tm_rot 127.0.0.1/32 scram-sha-256\nhost replication tm_rot 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(hba, append([]byte(rules), old...), 0o600); err != nil { // keeps the file's owner
		t.Fatal(err)
	}
	pg.Exec(t, "postgres", "SELECT pg_reload_conf()")
	dsn := func(pw string) string {
		return fmt.Sprintf("postgres://tm_rot:%s@127.0.0.1:%d/catalog?sslmode=disable", pw, pg.Port)
	}
	testenv.Eventually(t, 30*time.Second, "the server checks tm_rot's password", func() error {
		c, err := pgx.Connect(ctx, dsn("wrong"))
		if err == nil {
			c.Close(ctx)
			return fmt.Errorf("tm_rot connected with a wrong password")
		}
		return nil
	})
	if _, err := migrations.Up(ctx, pg.DSN("catalog"), testenv.Logger(t)); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, "apikey", "create", "--pg", pg.DSN("catalog"), "--tenant", "acme")
	if code != 0 {
		t.Fatalf("apikey create: exit %d\n%s\n%s", code, out, errs)
	}
	key := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])

	r := testenv.StartRedis(t)
	testenv.SetACLUser(t, r.Addr, "tmrot", "redis-old", "~* &* +@all")
	admin := r.Client(t)

	dir := t.TempDir()
	pgFile, redisFile := filepath.Join(dir, "pg"), filepath.Join(dir, "redis")
	write := func(p, v string) {
		t.Helper()
		// Written to a new file and renamed over the old one, as the
		// kubelet and the Vault agent do.
		if err := os.WriteFile(p+".new", []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
	}
	write(pgFile, dsn("pg-old"))
	write(redisFile, fmt.Sprintf("redis://tmrot:redis-old@%s/0", r.Addr))
	t.Setenv("TIDEMARK_PG_FILE", pgFile)
	t.Setenv("TIDEMARK_REDIS_FILE", redisFile)

	k := testenv.StartKafka(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errc := make(chan string, 2)
	var logs [2]bytes.Buffer
	start := func(i int, args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o bytes.Buffer
			if code := run(rctx, args, &o, &logs[i]); code != 0 && rctx.Err() == nil {
				errc <- fmt.Sprintf("%s exited %d", args[0], code)
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	start(0, "capture", "--kafka", k.BrokerList(), "--partitions", "2", "--metrics-addr", "", "--retry-max", "500ms")
	start(1, "serve", "--addr", addr, "--metrics-addr", "", "--audit-rate", "0", "--warm-top", "0")
	failed := func() {
		select {
		case e := <-errc:
			t.Fatalf("%s\ncapture:\n%s\nserve:\n%s", e, logs[0].String(), logs[1].String())
		default:
		}
	}

	pc := pg.Connect(t, "postgres")
	walsender := func() (int32, error) {
		var pid *int32
		if err := pc.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'tidemark'`).Scan(&pid); err != nil {
			return 0, err
		}
		if pid == nil {
			return 0, fmt.Errorf("slot tidemark is not active")
		}
		return *pid, nil
	}
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		if method != "GET" {
			req.Header.Set("Idempotency-Key", method+path+body)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	redisClients := func() (int, error) {
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			return 0, err
		}
		return strings.Count(list, " user=tmrot "), nil
	}
	// serve writes and reads (Postgres pool, Redis), capture streams.
	works := func(item string) func() error {
		return func() error {
			failed()
			if c, b := do("POST", "/v1/catalog/items", `{"item_id":"`+item+`","display":{"n":1}}`); c != 201 && c != 409 {
				return fmt.Errorf("POST %s: %d %s", item, c, b)
			}
			if c, b := do("GET", "/v1/catalog/items/"+item, ""); c != 200 {
				return fmt.Errorf("GET %s: %d %s", item, c, b)
			}
			if _, err := walsender(); err != nil {
				return err
			}
			if n, err := redisClients(); err != nil || n == 0 {
				return fmt.Errorf("no Redis connection as tmrot (%d, %v)", n, err)
			}
			return nil
		}
	}
	testenv.Eventually(t, 120*time.Second, "serve and capture run with the first passwords", works("before"))
	before, _ := walsender()

	// Rotate: the servers first, then the files (as a rotation does).
	pg.Exec(t, "postgres", "ALTER ROLE tm_rot PASSWORD 'pg-new'")
	testenv.SetACLUser(t, r.Addr, "tmrot", "redis-new", "~* &* +@all")
	write(pgFile, dsn("pg-new"))
	write(redisFile, fmt.Sprintf("redis://tmrot:redis-new@%s/0", r.Addr))
	var killed []int32
	rows, err := pc.Query(ctx, `SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'tm_rot'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int32
		var ok bool
		if err := rows.Scan(&pid, &ok); err != nil {
			t.Fatal(err)
		}
		killed = append(killed, pid)
	}
	if rows.Err() != nil || len(killed) < 3 {
		t.Fatalf("terminated tm_rot's backends %v (err %v), want serve's pool and capture's connections", killed, rows.Err())
	}
	if n, err := admin.ClientKillByFilter(ctx, "USER", "tmrot").Result(); err != nil || n == 0 {
		t.Fatalf("CLIENT KILL USER tmrot: %d, %v", n, err)
	}
	t.Logf("rotated; terminated Postgres backends %v (walsender %d) and tmrot's Redis connections", killed, before)

	testenv.Eventually(t, 120*time.Second, "serve and capture reconnect with the rotated passwords", func() error {
		if err := works("after")(); err != nil {
			return err
		}
		pid, _ := walsender()
		if pid == before || slices.Contains(killed, pid) {
			return fmt.Errorf("the slot's walsender is still %d", pid)
		}
		var n int
		if err := pc.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE usename = 'tm_rot' AND NOT pid = ANY($1)`, killed).Scan(&n); err != nil || n < 3 {
			return fmt.Errorf("%d new tm_rot backends (err %v)", n, err)
		}
		return nil
	})
	n, _ := redisClients()
	pid, _ := walsender()
	t.Logf("after rotation: slot streamed by walsender %d, %d Redis connections as tmrot, POST+GET 200", pid, n)
}
