package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestReadThroughKeepsThePromise builds this service and runs it as its own
// process beside tidemark's capture and apply, against real Postgres, Redis
// and Kafka, while a reader asks for three products every 10 ms. Every
// answer is judged by the chaos checker's rules against the commit history
// Postgres recorded (no answer older than the 30 s promise): across an
// invalidation (a raw UPDATE while the pipeline runs is served within
// seconds) and across a stalled pipeline (the applier killed: the cached
// version keeps being served, but none past the promise after the commit
// that replaced it, even with the source locked so nothing can refresh it).
func TestReadThroughKeepsThePromise(t *testing.T) {
	pg := testenv.StartPostgres(t, testenv.PGConf("track_commit_timestamp", "on"))
	db := pg.NewDatabase(t)
	dsn := pg.DSN(db)
	pg.Exec(t, db, `CREATE SCHEMA shop;
		CREATE TABLE shop.products (shop_id text NOT NULL, sku text NOT NULL, rev bigint NOT NULL DEFAULT 1,
		    title text, status text NOT NULL DEFAULT 'live', updated_at timestamptz NOT NULL DEFAULT now(),
		    PRIMARY KEY (shop_id, sku));
		INSERT INTO shop.products (shop_id, sku, title) SELECT 'acme', 'sku-' || i, 'Lamp ' || i FROM generate_series(1, 3) i;`)
	r := testenv.StartRedis(t)
	k := testenv.StartKafka(t)
	bin := testenv.Binary(t)
	table := []string{"--table", "shop.products", "--tenant-column", "shop_id", "--item-column", "sku", "--version-column", "rev",
		"--state-column", "status", "--deleted-state", "gone", "--active-state", "live", "--payload-columns", "title"}
	if out, err := exec.Command(bin, append([]string{"adopt", "--pg", dsn}, table...)...).CombinedOutput(); err != nil {
		t.Fatalf("tidemark adopt: %v\n%s", err, out)
	}
	service := filepath.Join(t.TempDir(), "readthrough")
	if out, err := exec.Command("go", "build", "-trimpath", "-o", service, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build the service: %v\n%s", err, out)
	}
	topic, group, slot := testenv.Unique(t, "topic"), testenv.Unique(t, "group"), testenv.Unique(t, "slot")
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	start(t, "capture", bin, nil, append([]string{"capture", "--pg", dsn, "--kafka", k.BrokerList(), "--topic", topic,
		"--slot", slot, "--partitions", "3", "--metrics-addr", ""}, table...)...)
	apply := start(t, "apply", bin, nil, "apply", "--kafka", k.BrokerList(), "--redis", r.URL(), "--topic", topic,
		"--group", group, "--session-timeout", "2s", "--metrics-addr", "")
	// The pipeline first, as an operator gates on `tidemark status`: the
	// applier has published the watermark of every partition.
	rdb := r.Client(t)
	testenv.Eventually(t, 60*time.Second, "the applier publishes the watermark", func() error {
		h, err := rdb.HGetAll(context.Background(), schema.WatermarkKey(promise.Namespace)).Result()
		if err != nil {
			return err
		}
		n, _ := strconv.Atoi(h[schema.FieldPartitions])
		for p := range n {
			if h[schema.WatermarkField(int32(p))] == "" {
				return fmt.Errorf("no watermark for partition %d: %v", p, h)
			}
		}
		if n == 0 {
			return fmt.Errorf("no partitions in the watermark: %v", h)
		}
		return nil
	})
	start(t, "readthrough", service, []string{"PG=" + dsn, "REDIS=" + r.URL(), "ADDR=" + addr})

	// The source's history: every version of the three products with the
	// commit time Postgres recorded.
	src := chaos.NewSource()
	history := func() {
		t.Helper()
		conn := pg.Connect(t, db)
		defer conn.Close(context.Background())
		rows, err := conn.Query(context.Background(), `SELECT shop_id, sku, rev, status = 'gone', pg_xact_commit_timestamp(xmin) FROM shop.products`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var c chaos.Commit
			if err := rows.Scan(&c.Tenant, &c.Item, &c.Version, &c.Deleted, &c.At); err != nil {
				t.Fatal(err)
			}
			src.Add(c)
		}
	}
	history()
	update := func(sku string) (int64, time.Time) {
		t.Helper()
		// A raw UPDATE that leaves rev alone: the version trigger bumps it.
		pg.Exec(t, db, `UPDATE shop.products SET title = title || ' (new)' WHERE shop_id = 'acme' AND sku = $1`, sku)
		history()
		h := src.History("acme", sku)
		return h[len(h)-1].Version, h[len(h)-1].At
	}

	var mu sync.Mutex
	var answers []chaos.Answer
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the reader
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			a := get(addr, fmt.Sprintf("sku-%d", i%3+1))
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { stop(); wg.Wait() }()
	last := func(sku string) chaos.Answer {
		mu.Lock()
		defer mu.Unlock()
		for i := len(answers) - 1; i >= 0; i-- {
			if answers[i].Item == sku {
				return answers[i]
			}
		}
		return chaos.Answer{}
	}
	hit := func(sku string) func() error {
		return func() error {
			if a := last(sku); a.Status != 200 || !strings.HasPrefix(a.CacheStatus, "tidemark; hit") {
				return fmt.Errorf("last answer for %s: %d %q", sku, a.Status, a.CacheStatus)
			}
			return nil
		}
	}
	testenv.Eventually(t, 90*time.Second, "the service answers sku-1 and sku-2 from the cache", func() error {
		if err := hit("sku-1")(); err != nil {
			return err
		}
		return hit("sku-2")()
	})

	// An invalidation: the pipeline runs, the new version is served within seconds.
	v1, at1 := update("sku-1")
	testenv.Eventually(t, 20*time.Second, "sku-1's new version is served while the pipeline runs", func() error {
		if a := last("sku-1"); a.Version != v1 || a.Received.Before(at1) {
			return fmt.Errorf("last answer for sku-1: %d version %d (%s), want version %d", a.Status, a.Version, a.CacheStatus, v1)
		}
		return nil
	})
	t.Logf("invalidation: version %d committed at %s served %s later", v1, at1.Format(time.StampMilli), firstServed(&mu, &answers, "sku-1", v1).Sub(at1))

	// A stalled pipeline: the applier is gone, nothing invalidates sku-2,
	// and the source is locked, so no refresh can replace the cached value
	// either. It is served until its hard deadline, then no more.
	testenv.Eventually(t, 30*time.Second, "sku-2 is a cache hit before the stall", hit("sku-2"))
	apply.kill()
	v2, at2 := update("sku-2")
	lock := pg.Connect(t, db)
	tx, err := lock.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `LOCK TABLE shop.products IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, promise.Bound+20*time.Second, "sku-2's old version stops being served with the pipeline stalled", func() error {
		if a := last("sku-2"); a.Status == 200 && a.Version < v2 {
			return fmt.Errorf("%s after the commit: version %d (%s)", a.Sent.Sub(at2).Round(time.Millisecond), a.Version, a.CacheStatus)
		}
		return nil
	})
	time.Sleep(2 * time.Second) // answers past the deadline, with the source still locked
	tx.Rollback(context.Background())
	lock.Close(context.Background())
	testenv.Eventually(t, 30*time.Second, "sku-2's new version is served once the source answers", func() error {
		if a := last("sku-2"); a.Version != v2 {
			return fmt.Errorf("last answer for sku-2: %d version %d (%s), want version %d", a.Status, a.Version, a.CacheStatus, v2)
		}
		return nil
	})
	stop()
	wg.Wait()
	history()

	checker := chaos.Checker{Bound: promise.Bound}
	var oldAfter, newBefore time.Time
	counts := map[int]int{}
	for _, a := range answers {
		counts[a.Status]++
		for _, v := range checker.Check(a, src).Violations {
			t.Errorf("%s: %s (answer %s/%s version %d, %s, sent %s)", v.Kind, v.Detail, a.Tenant, a.Item, a.Version, a.CacheStatus, a.Sent.Format(time.StampMilli))
		}
		if a.Item == "sku-2" && a.Status == 200 && a.Sent.After(at2) {
			if a.Version < v2 && a.Sent.After(oldAfter) {
				oldAfter = a.Sent
			}
			if a.Version == v2 && newBefore.IsZero() {
				newBefore = a.Sent
			}
		}
	}
	served := oldAfter.Sub(at2)
	if served < 10*time.Second {
		t.Fatalf("sku-2's old version was served only %s after its commit: the stall did not leave it cached (the test proves nothing)", served)
	}
	if served > promise.Bound {
		t.Errorf("sku-2's old version was served %s after the commit that replaced it, past the %s promise", served, promise.Bound)
	}
	t.Logf("stall: old version of sku-2 served until %s after the commit, then unavailable until the source answered; new version from %s (bound %s); answers by status %v",
		served.Round(time.Millisecond), newBefore.Sub(at2).Round(time.Millisecond), promise.Bound, counts)
}

// firstServed is when the first answer with version v of sku was sent.
func firstServed(mu *sync.Mutex, answers *[]chaos.Answer, sku string, v int64) time.Time {
	mu.Lock()
	defer mu.Unlock()
	for _, a := range *answers {
		if a.Item == sku && a.Version == v {
			return a.Sent
		}
	}
	return time.Time{}
}

// get asks the service for one product, as the chaos harness records an answer.
func get(addr, sku string) chaos.Answer {
	a := chaos.Answer{Tenant: "acme", Item: sku, Sent: time.Now()}
	res, err := http.Get("http://" + addr + "/products/acme/" + sku)
	if err != nil {
		a.Received = time.Now()
		return a
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a.Received, a.Status, a.CacheStatus = time.Now(), res.StatusCode, res.Header.Get("Cache-Status")
	var body struct {
		Version int64 `json:"version"`
		Product struct {
			Shop, SKU string
		} `json:"product"`
	}
	if res.StatusCode == 200 && json.Unmarshal(b, &body) == nil {
		// The payload carries its own key; its version is the answer's (the
		// source read both in one statement).
		a.Version, a.PayloadTenant, a.PayloadItem, a.PayloadVersion = body.Version, body.Product.Shop, body.Product.SKU, body.Version
	}
	return a
}

// child is a process the test started; killed at the end.
type child struct {
	cmd *exec.Cmd
	out *bytes.Buffer
	mu  sync.Mutex
}

func (c *child) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd.ProcessState == nil {
		c.cmd.Process.Kill()
		c.cmd.Wait()
	}
}

func start(t *testing.T, name, bin string, env []string, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(bin, args...), out: &bytes.Buffer{}}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			o := c.out.String()
			t.Logf("--- %s output (tail) ---\n%s", name, o[max(0, len(o)-4000):])
		}
	})
	return c
}
