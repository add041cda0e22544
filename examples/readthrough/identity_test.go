package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/rollout"
)

// Issue 36, item 4: this service (shop.products) and the README's default
// `tidemark serve` (catalog.items) in one Redis, both on the default
// namespace. Before namespaces were bound to a mapping, serve answered
// `200 hit` with the service's payload for sku-7, a row catalog.items does
// not have. Now serve, started second, refuses the namespace at start with
// both mappings named. The service also shares serve's source pool by
// default (its presence is in the default pool, not a pool of its own).
// Both are real processes.
func TestServeOfAnotherTableRefusesTheServicesNamespace(t *testing.T) {
	pg := testenv.StartPostgres(t)
	dsn := pg.MigratedDatabase(t)
	conn := pg.Connect(t, dsn[strings.LastIndex(dsn, "/")+1:strings.Index(dsn, "?")])
	_, err := conn.Exec(context.Background(), `CREATE SCHEMA shop;
		CREATE TABLE shop.products (shop_id text NOT NULL, sku text NOT NULL, rev bigint NOT NULL DEFAULT 1,
		    title text, status text NOT NULL DEFAULT 'live', PRIMARY KEY (shop_id, sku));
		INSERT INTO shop.products (shop_id, sku, title) VALUES ('acme', 'sku-7', 'Lamp 7');`)
	conn.Close(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := testenv.StartRedis(t)
	bin := testenv.Binary(t)
	service := filepath.Join(t.TempDir(), "readthrough")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", service, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build the service: %v\n%s", err, out)
	}
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	svc := startProc(t, "readthrough", service, []string{"PG=" + dsn, "REDIS=" + r.URL(), "ADDR=" + addr})
	var body string
	testenv.Eventually(t, 30*time.Second, "the service answers sku-7 from the cache", func() error {
		st, cs, b, err := httpGet("http://"+addr+"/products/acme/sku-7", "")
		if err != nil || st != 200 || !strings.Contains(cs, "hit") {
			return fmt.Errorf("status %d, Cache-Status %q, err %v", st, cs, err)
		}
		body = b
		return nil
	})
	rdb := r.Client(t)
	ctx := context.Background()
	if n, err := rdb.ZCard(ctx, rollout.ServeKey(promise.SourcePool)).Result(); err != nil || n != 1 {
		t.Errorf("want the service counted in serve's default source pool %q, got %d members (%v)", promise.SourcePool, n, err)
	}
	if n, _ := rdb.Exists(ctx, rollout.ServeKey("products")).Result(); n != 0 {
		t.Errorf("want no source pool of the service's own, got %s", rollout.ServeKey("products"))
	}

	key := strings.TrimSpace(lastLine(t, bin, "apikey", "create", "--pg", dsn, "--tenant", "acme"))
	api := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	serve := startProc(t, "serve", bin, nil, "serve", "--pg", dsn, "--redis", r.URL(), "--addr", api, "--metrics-addr", "")
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-serve.Done():
		default:
			st, cs, b, err := httpGet("http://"+api+"/v1/catalog/items/sku-7", key)
			if err == nil && st == 200 {
				serve.Kill()
				t.Fatalf("want serve of catalog.items refused the namespace the service's shop.products holds, got it answering sku-7 %d %s %s (the service cached %s)", st, cs, b, body)
			}
			if time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			t.Fatalf("want serve of catalog.items refused at start, still running after 60 s")
		}
		break
	}
	out := strings.ReplaceAll(serve.Output(), `\"`, `"`)
	for _, want := range []string{"shop.products (examples/readthrough)", "catalog.items#", `namespace "catalog"`} {
		if !strings.Contains(out, want) {
			t.Errorf("want serve's refusal to name %s, got:\n%s", want, serve.Tail(3000))
		}
	}
	if serve.ExitCode() == 0 {
		t.Errorf("want serve to exit with an error, got exit code 0")
	}
	t.Logf("serve refused: %s", lastMatching(out, "namespace"))
	// The service keeps serving its own rows.
	if st, cs, _, err := httpGet("http://"+addr+"/products/acme/sku-7", ""); err != nil || st != 200 {
		t.Errorf("want the service still answering, got %d %q %v", st, cs, err)
	}
	_ = svc
}

func startProc(t *testing.T, name, bin string, env []string, args ...string) *proc.Process {
	t.Helper()
	p := proc.New(proc.Config{Name: name, Bin: bin, Args: args, Env: env})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("--- %s output (tail) ---\n%s", name, p.Tail(3000))
		}
	})
	return p
}

func httpGet(url, bearer string) (int, string, string, error) {
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return 0, "", "", err
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	cl := http.Client{Timeout: 5 * time.Second}
	res, err := cl.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("Cache-Status"), string(b), nil
}

func lastLine(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

func lastMatching(out, word string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], word) {
			return lines[i]
		}
	}
	return ""
}
