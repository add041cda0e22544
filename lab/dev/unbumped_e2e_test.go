package dev

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// answer is one GET as a visitor sees it.
type answer struct {
	code     int
	version  float64
	display  string // the display as JSON
	cacheHdr string
	age      string
}

func getAnswer(t *testing.T, base, key, item string) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/catalog/items/"+item, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m struct {
		Version float64         `json:"version"`
		Display json.RawMessage `json:"display"`
	}
	_ = json.Unmarshal(b, &m)
	return answer{code: res.StatusCode, version: m.Version, display: string(m.Display),
		cacheHdr: res.Header.Get("Cache-Status"), age: res.Header.Get("Age")}
}

// sourceReads is serve's count of source reads (every class and result).
func sourceReads(t *testing.T, metricsAddr string) float64 {
	t.Helper()
	var n float64
	if f, ok := scrape(t, metricsAddr)["tidemark_api_source_reads_total"]; ok {
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// staleFor writes with write (a change that leaves the version as it was)
// once item is a cache hit, then reads it every 200 ms until the answer
// carries want. It fails when an answer without want is given 30 s or more
// after the commit (the promise), and reports the last stale answer's age
// and the source reads the change cost.
func staleFor(t *testing.T, base, key, metricsAddr, item, want string, write func()) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, item+" is a cache hit", func() error {
		a := getAnswer(t, base, key, item)
		if a.code != 200 || !strings.HasPrefix(a.cacheHdr, "tidemark; hit") {
			return fmt.Errorf("GET %s = %d, Cache-Status %q", item, a.code, a.cacheHdr)
		}
		return nil
	})
	before := sourceReads(t, metricsAddr)
	write()
	committed := time.Now()
	var last answer
	var lastAt time.Duration
	for {
		a := getAnswer(t, base, key, item)
		since := time.Since(committed)
		if a.code == 200 && strings.Contains(a.display, want) {
			reads := sourceReads(t, metricsAddr) - before
			t.Logf("%s: new display served %v after the commit (%s, Age %s); last old answer %v after it (%s, Age %s); source reads since the write: %.0f",
				item, since.Round(10*time.Millisecond), a.cacheHdr, a.age, lastAt.Round(10*time.Millisecond), last.cacheHdr, last.age, reads)
			return
		}
		last, lastAt = a, since
		if since >= 30*time.Second {
			t.Fatalf("%s: still answered %d %s (version %v, Cache-Status %q, Age %s) %v after a committed change to %s: past the 30 s promise",
				item, a.code, a.display, a.version, a.cacheHdr, a.age, since.Round(time.Millisecond), want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Issue 37, reproductions 2 and 3: on catalog.items, a write under
// session_replication_role = replica (pg_restore, ETL loaders, logical
// replication's apply workers) fires no trigger, so the version stays; with
// no auditor (--audit-rate 0) and after the warm-up, nothing but the change
// event can reach the cached value, and it must within the promise.
func TestReplicaRoleWriteReachesReaders(t *testing.T) {
	e := newE2E(t, func(e *e2e) { e.serve.args = append(e.serve.args, "--audit-rate", "0") })
	const item = "item-00042"
	staleFor(t, e.apiBase, e.keys[0].key, e.serveMetrics, item, "BULK-LOADED", func() {
		ctx := testenv.Context(t, 10*time.Second)
		tx, err := e.pool.Begin(ctx)
		if err == nil {
			defer tx.Rollback(ctx)
			_, err = tx.Exec(ctx, `SET LOCAL session_replication_role = replica`)
		}
		if err == nil {
			_, err = tx.Exec(ctx, `UPDATE catalog.items SET display = '{"title": "BULK-LOADED"}' WHERE tenant_id = $1 AND item_id = $2`, e.keys[0].tenant, item)
		}
		if err == nil {
			err = tx.Commit(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
}

// Issue 37, reproduction 1: an adopted table with a BEFORE UPDATE trigger of
// the operator's own that sorts after tidemark's version trigger changes the
// payload after the version was decided; the change still reaches readers
// within the promise.
func TestLaterTriggerWriteReachesReaders(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	db := pg.NewDatabase(t)
	dsn := pg.DSN(db)
	pg.Exec(t, db, `CREATE SCHEMA shop;
		CREATE TABLE shop.products (
		    id bigserial PRIMARY KEY, shop_id text NOT NULL, sku text NOT NULL, rev bigint NOT NULL DEFAULT 1,
		    title text, price_cents int, price_label text, status text NOT NULL DEFAULT 'live',
		    updated_at timestamptz NOT NULL DEFAULT now(), UNIQUE (shop_id, sku));
		INSERT INTO shop.products (shop_id, sku, title, price_cents, price_label)
		    SELECT 'acme', 'sku-' || i, 'Lamp ' || i, 100 * i, '$' || (100 * i) FROM generate_series(1, 10) i;`)
	r := testenv.StartRedis(t)
	k := testenv.StartKafka(t)
	bin := testenv.Binary(t)
	table := []string{"--table", "shop.products", "--tenant-column", "shop_id", "--item-column", "sku", "--version-column", "rev",
		"--state-column", "status", "--deleted-state", "gone", "--active-state", "live", "--payload-columns", "title,price_label"}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tidemark %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(append([]string{"adopt", "--pg", dsn}, table...)...)
	// The operator's own trigger, added after adopt: it sorts after
	// tidemark's, so it changes price_label once the version is decided.
	pg.Exec(t, db, `CREATE FUNCTION shop.price_label() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN NEW.price_label := '$' || NEW.price_cents; RETURN NEW; END $$;
		CREATE TRIGGER zzzzzz_price_label BEFORE UPDATE ON shop.products FOR EACH ROW EXECUTE FUNCTION shop.price_label();`)
	key := strings.TrimSpace(lastLine(run("apikey", "create", "--pg", dsn, "--tenant", "acme")))
	topic, group, slot := testenv.Unique(t, "topic"), testenv.Unique(t, "group"), testenv.Unique(t, "slot")
	apiAddr, serveMetrics := freeAddr(t), freeAddr(t)
	startAll(t,
		&proc{t: t, name: "capture", args: append([]string{"capture", "--pg", dsn, "--kafka", k.BrokerList(), "--topic", topic,
			"--slot", slot, "--partitions", "3", "--metrics-addr", freeAddr(t)}, table...)},
		&proc{t: t, name: "apply", args: []string{"apply", "--kafka", k.BrokerList(), "--redis", r.URL(), "--topic", topic,
			"--group", group, "--session-timeout", "2s", "--metrics-addr", freeAddr(t)}},
		&proc{t: t, name: "serve", args: append([]string{"serve", "--pg", dsn, "--redis", r.URL(), "--addr", apiAddr,
			"--metrics-addr", serveMetrics, "--audit-rate", "0"}, table...)})
	base := "http://" + apiAddr
	testenv.Eventually(t, 90*time.Second, "serve answers sku-3 and the watermark is known", func() error {
		if a := getAnswer(t, base, key, "sku-3"); a.code != 200 {
			return fmt.Errorf("GET sku-3 = %d", a.code)
		}
		if a := getAnswer(t, base, key, "sku-3"); !strings.Contains(a.cacheHdr, "hit") {
			return fmt.Errorf("GET sku-3 Cache-Status %q", a.cacheHdr)
		}
		return nil
	})
	staleFor(t, base, key, serveMetrics, "sku-3", "$777", func() {
		pg.Exec(t, db, `UPDATE shop.products SET price_cents = 777 WHERE shop_id = 'acme' AND sku = 'sku-3'`)
	})
}
