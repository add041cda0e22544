package dev

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/testenv"
)

// Issue 36: the rollout settings and the source budget across deployments,
// namespaces and a cache tier that loses its data, on real processes.

// serveAt is one more `tidemark serve` of the pipeline's Postgres and Redis,
// with its own API and metrics addresses; args are added to the pipeline's.
func (e *e2e) serveAt(name string, args ...string) (p *proc, base, metrics string) {
	addr := freeAddr(e.t)
	metrics = freeAddr(e.t)
	p = &proc{t: e.t, name: name, args: append([]string{"serve", "--pg", e.dsn, "--redis", e.redisURL, "--addr", addr,
		"--metrics-addr", metrics}, args...)}
	return p, "http://" + addr, metrics
}

// tidemark runs the built binary with env added to the test's environment
// and returns its combined output; a failure fails the test.
func tidemark(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tidemark %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// answersWithin fails unless GETs of item through base carry want in their
// Cache-Status within d.
func answersWithin(t *testing.T, d time.Duration, what, base, key, item, want string) {
	t.Helper()
	testenv.Eventually(t, d, what, func() error {
		if a := getAnswer(t, base, key, item); a.code != 200 || !strings.Contains(a.cacheHdr, want) {
			return fmt.Errorf("GET %s = %d, Cache-Status %q; want 200 and %q", item, a.code, a.cacheHdr, want)
		}
		return nil
	})
}

// neverFor fails if a GET of item through base answers with a Cache-Status
// containing bad at any time during d (one GET every 100 ms).
func neverFor(t *testing.T, d time.Duration, what, base, key, item, bad string) {
	t.Helper()
	n := 0
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		a := getAnswer(t, base, key, item)
		if strings.Contains(a.cacheHdr, bad) {
			t.Fatalf("%s: GET %s answered %d with Cache-Status %q after %d answers without it", what, item, a.code, a.cacheHdr, n)
		}
		n++
	}
}

// A rolled-back tenant stays rolled back when the cache tier loses the
// rollout settings (the hash deleted; everything flushed): a serve process
// started afterwards serves it from the source, never from the cache, and
// `tidemark rollout status` shows the setting and the loss.
func TestRollbackSurvivesLostRolloutSettings(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	key, item := e.keys[0], "item-00007"
	env := []string{"TIDEMARK_PG=" + e.dsn, "TIDEMARK_REDIS=" + e.redisURL}
	getAnswer(t, e.apiBase, key.key, item)
	answersWithin(t, 30*time.Second, "a hit before the rollback", e.apiBase, key.key, item, "tidemark; hit")
	t.Log(strings.TrimSpace(tidemark(t, env, "rollout", "set", "source", "--tenant", key.tenant)))
	answersWithin(t, 10*time.Second, "the rollback in force", e.apiBase, key.key, item, "detail=rollout-source")
	// The processes that saw the settings would keep them: what is tested
	// is a serve process that starts after the loss.
	e.serve.stop()

	ctx := testenv.Context(t, 5*time.Minute)
	for _, loss := range []struct {
		name string
		do   func() error
	}{
		{"the rollout hash deleted", func() error { return e.rdb.Del(ctx, "{catalog:v1:_rollout}:modes").Err() }},
		{"FLUSHALL", func() error { return e.rdb.FlushAll(ctx).Err() }},
	} {
		if err := loss.do(); err != nil {
			t.Fatal(err)
		}
		status := tidemark(t, env, "rollout", "status")
		serve, base, metrics := e.serveAt("serve after "+loss.name, "--rollout-poll", "200ms")
		startAll(t, serve)
		answersWithin(t, 60*time.Second, loss.name+": the new serve process answers "+item, base, key.key, item, "")
		neverFor(t, 3*time.Second, loss.name+": the new serve process serves the rolled-back tenant "+key.tenant+" from the cache",
			base, key.key, item, "tidemark; hit")
		answersWithin(t, 5*time.Second, loss.name+": the new serve process reads from the source", base, key.key, item, "detail=rollout-source")
		if n := metricValue(t, metrics, "tidemark_api_rollout_losses_total"); n != 1 {
			t.Errorf("%s: the new serve process counted %v losses of the rollout settings, want 1", loss.name, n)
		}
		if !strings.Contains(serve.output(), "the cache tier lost its copy of the rollout settings") {
			t.Errorf("%s: the new serve process did not log the loss", loss.name)
		}
		t.Logf("%s: rollout status before the new serve process started:\n%s", loss.name, status)
		setting := regexp.MustCompile(`(?m)^` + key.tenant + `\s+source\s`)
		if !strings.Contains(status, "LOST") || !setting.MatchString(status) {
			t.Errorf("%s: rollout status does not show the loss and %s's setting:\n%s", loss.name, key.tenant, status)
		}
		after := tidemark(t, env, "rollout", "status")
		t.Logf("%s: rollout status after it started:\n%s", loss.name, after)
		if !strings.Contains(after, "restored Postgres's record") || !setting.MatchString(after) {
			t.Errorf("%s: rollout status does not show the restore and %s's setting:\n%s", loss.name, key.tenant, after)
		}
		serve.stop()
	}
}

// metricValue is the sum of a metric's series on metricsAddr (0: absent).
func metricValue(t *testing.T, metricsAddr, name string) float64 {
	t.Helper()
	var n float64
	if f, ok := scrape(t, metricsAddr)[name]; ok {
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// shopTable is a second deployment's table, in the pipeline's database.
var shopTable = []string{"--table", "shop.products", "--tenant-column", "shop_id", "--item-column", "sku", "--version-column", "rev",
	"--state-column", "status", "--deleted-state", "gone", "--active-state", "live", "--payload-columns", "title"}

// `tidemark rollout` takes the namespace from TIDEMARK_NAMESPACE, as serve
// does, and the pool from the namespace's identity record: with
// TIDEMARK_NAMESPACE=shop, `rollout set source --all` switches the shop
// deployment's serve process to the source and leaves catalog's answering
// from the cache.
func TestRolloutFollowsTheNamespaceOfTheEnvironment(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	key := e.keys[0]
	pg, err := pgx.Connect(testenv.Context(t, time.Minute), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	if _, err := pg.Exec(context.Background(), `CREATE SCHEMA shop;
		CREATE TABLE shop.products (shop_id text NOT NULL, sku text NOT NULL, rev bigint NOT NULL DEFAULT 1, title text,
		    status text NOT NULL DEFAULT 'live', updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (shop_id, sku))`); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Exec(context.Background(), `INSERT INTO shop.products (shop_id, sku, title)
		SELECT $1, 'sku-' || i, 'Lamp ' || i FROM generate_series(1, 10) i`, key.tenant); err != nil {
		t.Fatal(err)
	}
	shop, shopBase, _ := e.serveAt("serve shop", append([]string{"--namespace", "shop", "--source-pool", "shop"}, shopTable...)...)
	startAll(t, shop)
	getAnswer(t, shopBase, key.key, "sku-1")
	answersWithin(t, 60*time.Second, "shop's serve: a hit before the rollback", shopBase, key.key, "sku-1", "tidemark; hit")
	getAnswer(t, e.apiBase, key.key, "item-00001")
	answersWithin(t, 30*time.Second, "catalog's serve: a hit before the rollback", e.apiBase, key.key, "item-00001", "tidemark; hit")

	out := tidemark(t, []string{"TIDEMARK_NAMESPACE=shop", "TIDEMARK_PG=" + e.dsn, "TIDEMARK_REDIS=" + e.redisURL}, "rollout", "set", "source", "--all")
	t.Log(strings.TrimSpace(out))
	answersWithin(t, 10*time.Second, "shop's serve follows `TIDEMARK_NAMESPACE=shop tidemark rollout set source --all`",
		shopBase, key.key, "sku-1", "detail=rollout-source")
	neverFor(t, 3*time.Second, "catalog's serve after the shop's rollback", e.apiBase, key.key, "item-00001", "rollout-source")
	if status := tidemark(t, []string{"TIDEMARK_NAMESPACE=shop", "TIDEMARK_PG=" + e.dsn, "TIDEMARK_REDIS=" + e.redisURL}, "rollout", "status"); !regexp.MustCompile(`(?m)^\*\s+source\s`).MatchString(status) {
		t.Errorf("rollout status of namespace shop does not show every tenant in source:\n%s", status)
	}
}

// Two namespaces' serve processes without --source-pool read the source
// within one foreground budget (the default pool is one per source), as
// the source counts it (pg_stat_statements), under a cold-key load on both.
func TestTwoNamespacesShareOneSourceBudget(t *testing.T) {
	t.Parallel()
	const rate = 40.0
	// No auditor and no warmer: only the load's foreground reads.
	flags := []string{"--source-foreground-rate", fmt.Sprint(rate), "--audit-rate", "0", "--warm-top", "0"}
	e := newE2E(t, func(e *e2e) { e.serve.args = append(e.serve.args, flags...) })
	serve2, base2, metrics2 := e.serveAt("serve catalog2", append([]string{"--namespace", "catalog2"}, flags...)...)
	startAll(t, serve2)
	answersWithin(t, 60*time.Second, "catalog2's serve answers", base2, e.keys[0].key, "item-00001", "")
	ctx := testenv.Context(t, 3*time.Minute)
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}

	// Cold keys of one tenant (so its fair share is the whole class): each
	// serve process reads its own half of the demo items, round and round
	// (a key refused by the budget is still cold, one read is a hit), from 6
	// workers each, well above the rate.
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	const workers = 6
	var mu sync.Mutex
	answers := []map[string]int{{}, {}} // by serve process: "<code> <Cache-Status detail>" -> count
	for i, base := range []string{e.apiBase, base2} {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := w; lctx.Err() == nil; j += workers {
					a := getAnswer(t, base, e.keys[0].key, fmt.Sprintf("item-%05d", i*demoItems/2+1+j%(demoItems/2)))
					detail := a.cacheHdr
					if _, d, ok := strings.Cut(a.cacheHdr, "detail="); ok {
						detail, _, _ = strings.Cut(d, ";")
					}
					mu.Lock()
					answers[i][fmt.Sprintf("%d %s", a.code, detail)]++
					mu.Unlock()
					time.Sleep(10 * time.Millisecond)
				}
			}()
		}
	}
	defer func() { stop(); wg.Wait() }()
	time.Sleep(3 * time.Second) // the budget's burst is spent
	count := func() (map[string]float64, float64, float64, time.Time) {
		cur, class, at, err := chaos.SourceStatements(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		return chaos.ReadsSince(map[int64]float64{}, cur, class), sourceReads(t, e.serveMetrics), sourceReads(t, metrics2), at
	}
	c0, a0, b0, t0 := count()
	time.Sleep(15 * time.Second)
	c1, a1, b1, t1 := count()
	secs := t1.Sub(t0).Seconds()
	fg := c1[chaos.ClassForeground] - c0[chaos.ClassForeground]
	got := fg / secs
	others := map[string]float64{}
	for class, n := range c1 {
		if class != chaos.ClassForeground && n > c0[class] {
			others[class] = n - c0[class]
		}
	}
	t.Logf("foreground source reads (pg_stat_statements): %.0f in %.1f s = %.1f/s against --source-foreground-rate %g (other classes: %v); serve catalog %.0f, serve catalog2 %.0f source reads of every class (their own counts)",
		fg, secs, got, rate, others, a1-a0, b1-b0)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("answers (whole run): serve catalog %v; serve catalog2 %v", answers[0], answers[1])
	if got > rate*1.25 {
		t.Errorf("two namespaces read the source at %.1f/s, more than one budget of %g/s", got, rate)
	}
	if a1-a0 == 0 || b1-b0 == 0 || answers[0]["503 budget"] == 0 || answers[1]["503 budget"] == 0 {
		t.Errorf("the load did not reach the budget on both processes (%.0f and %.0f reads; answers %v, %v): the test proves nothing",
			a1-a0, b1-b0, answers[0], answers[1])
	}
}
