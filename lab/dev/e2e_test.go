package dev

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/inspect"
	labproc "github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
	"github.com/tidemark/tidemark/status"
)

// proc is one real `tidemark` process of the pipeline, a lab/proc process
// of the test binary, killable with -9; a failed start fails the test.
type proc struct {
	t    *testing.T
	name string
	args []string
	bin  string // empty: testenv.Binary

	once sync.Once
	p    *labproc.Process
}

func (p *proc) process() *labproc.Process {
	p.once.Do(func() {
		bin := p.bin
		if bin == "" {
			bin = testenv.Binary(p.t)
		}
		p.p = labproc.New(labproc.Config{Name: p.name, Bin: bin, Args: p.args})
	})
	return p.p
}

func (p *proc) start() {
	p.t.Helper()
	if err := p.process().Start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *proc) kill() { p.process().Kill() }

// signal sends sig to the running process (SIGSTOP pauses it).
func (p *proc) signal(sig syscall.Signal) { _ = p.process().Signal(sig) }

func (p *proc) stop() { p.process().Stop(30 * time.Second) }

func (p *proc) output() string { return p.process().Output() }

// startAll starts ps, each killed when the test ends; a failed test logs
// the tail of each one's output.
func startAll(t *testing.T, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		p.start()
		t.Cleanup(p.kill)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range ps {
				t.Logf("--- %s output (tail) ---\n%s", p.name, tail(p.output(), 6000))
			}
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

type e2e struct {
	t        *testing.T
	dsn      string
	redisURL string
	brokers  string
	topic    string
	group    string
	apiBase  string
	keys     []apiKey
	rdb      *redis.Client
	pool     *pgxpool.Pool
	capture  *proc
	applier  *proc
	serve    *proc
	// serveMetrics is the serve process's metrics address (status page).
	serveMetrics string
	slot         string
}

// e2eFloorTTL keeps every floor for the whole test: floorsMatchSource reads
// a key's floor minutes after its last change, and with the default 60 s a
// slow run found expired floors (0) where every change had been applied.
const e2eFloorTTL = "10m"

func freeAddr(t *testing.T) string { return "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) }

// newE2E starts the pipeline; each of opts may change the processes'
// arguments before they start.
func newE2E(t *testing.T, opts ...func(*e2e)) *e2e {
	pg := testenv.SharedPostgres(t)
	r := testenv.StartRedis(t)
	k := testenv.StartKafka(t)
	e := &e2e{t: t, dsn: pg.MigratedDatabase(t), redisURL: r.URL(), brokers: k.BrokerList(),
		topic: testenv.Unique(t, "topic"), group: testenv.Unique(t, "group"), rdb: r.Client(t)}
	ctx := testenv.Context(t, time.Minute)
	var err error
	if e.keys, _, err = seedDemo(ctx, e.dsn, filepath.Join(t.TempDir(), "keys")); err != nil {
		t.Fatal(err)
	}
	if e.pool, err = pgxpool.New(ctx, e.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pool.Close)
	slot := testenv.Unique(t, "slot")
	e.slot = slot
	apiAddr := freeAddr(t)
	e.apiBase = "http://" + apiAddr
	e.capture = &proc{t: t, name: "capture", args: []string{"capture", "--pg", e.dsn, "--kafka", e.brokers, "--topic", e.topic,
		"--slot", slot, "--partitions", "6", "--metrics-addr", freeAddr(t)}}
	e.applier = &proc{t: t, name: "apply", args: []string{"apply", "--kafka", e.brokers, "--redis", e.redisURL, "--topic", e.topic,
		"--group", e.group, "--session-timeout", "2s", "--metrics-addr", freeAddr(t), "--cache-floor-ttl", e2eFloorTTL}}
	e.serveMetrics = freeAddr(t)
	e.serve = &proc{t: t, name: "serve", args: []string{"serve", "--pg", e.dsn, "--redis", e.redisURL, "--addr", apiAddr,
		"--metrics-addr", e.serveMetrics, "--kafka", e.brokers, "--topic", e.topic, "--group", e.group, "--slot", slot,
		"--status-every", "1s", "--cache-floor-ttl", e2eFloorTTL}}
	for _, o := range opts {
		o(e)
	}
	startAll(t, e.capture, e.applier, e.serve)
	testenv.Eventually(t, 60*time.Second, "pipeline ready (watermark known, API up)", func() error {
		rep, err := e.status(5*time.Second, 30*time.Second)
		if err != nil {
			return err
		}
		if rep.Verdict != status.OK {
			return fmt.Errorf("verdict %s: %s", rep.Verdict, rep.Reason)
		}
		_, _, err = e.get(e.keys[0], "item-00001")
		return err
	})
	return e
}

func (e *e2e) status(warn, slo time.Duration) (status.Report, error) {
	cfg := status.DefaultConfig()
	cfg.Brokers, cfg.Redis, cfg.Topic, cfg.Group, cfg.Warn, cfg.SLO = strings.Split(e.brokers, ","), e.redisURL, e.topic, e.group, warn, slo
	return status.Check(context.Background(), cfg)
}

// get returns the status code and the item's version (0 unless 200).
func (e *e2e) get(k apiKey, item string) (int, int64, error) {
	code, v, _, err := e.getStatus(k, item)
	return code, v, err
}

// getStatus also returns the Cache-Status header.
func (e *e2e) getStatus(k apiKey, item string) (int, int64, string, error) {
	req, _ := http.NewRequest(http.MethodGet, e.apiBase+"/v1/catalog/items/"+item, nil)
	req.Header.Set("Authorization", "Bearer "+k.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, "", err
	}
	defer resp.Body.Close()
	var it itemJSON
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &it); err != nil {
			return resp.StatusCode, 0, "", fmt.Errorf("decode %s: %w", b, err)
		}
	}
	return resp.StatusCode, it.Version, resp.Header.Get("Cache-Status"), nil
}

func (e *e2e) patch(k apiKey, item string, expected int64) (int, itemJSON, error) {
	body, _ := json.Marshal(map[string]any{"expected_version": expected, "display": map[string]any{"title": "patched"}})
	req, _ := http.NewRequest(http.MethodPatch, e.apiBase+"/v1/catalog/items/"+item, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+k.key)
	req.Header.Set("Idempotency-Key", fmt.Sprintf("e2e-%d", rand.Uint64()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, itemJSON{}, err
	}
	defer resp.Body.Close()
	var it itemJSON
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &it)
	return resp.StatusCode, it, nil
}

func randomItem() string { return fmt.Sprintf("item-%05d", 1+rand.N(demoItems)) }

// TestEndToEnd runs capture, apply and serve as real processes on real
// Postgres, Redis and kfake; writes 20,000 updates in SQL and some through
// the API while visitors read; kills each process once with SIGKILL and
// restarts it; then checks that Redis agrees with Postgres, that no read
// after an applied invalidation returned an older version, that inspect
// finds nothing served past the SLO, and that status says OK.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	const sqlUpdates = 20000
	var (
		wg          sync.WaitGroup
		sqlDone     atomic.Int64
		reads       atomic.Int64
		older       atomic.Int64
		apiPatches  atomic.Int64
		l1Reads     atomic.Int64
		fallbacks   atomic.Int64
		olderDetail atomic.Value
	)
	// Merchants writing straight to the catalog: transactions of 1-20
	// updates, one in ten rolled back.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sqlDone.Load() < sqlUpdates && ctx.Err() == nil {
			n := 1 + rand.N(20)
			tx, err := e.pool.Begin(ctx)
			if err != nil {
				continue
			}
			for i := 0; i < n; i++ {
				tenant := demoTenants[rand.N(len(demoTenants))]
				if _, err := tx.Exec(ctx, `UPDATE catalog.items SET version = version + 1, updated_at = now() WHERE tenant_id = $1 AND item_id = $2`, tenant, randomItem()); err != nil {
					break
				}
			}
			if rand.N(10) == 0 {
				tx.Rollback(ctx)
				continue
			}
			if tx.Commit(ctx) == nil {
				sqlDone.Add(int64(n))
			}
		}
	}()
	// Merchants writing through the API.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil && sqlDone.Load() < sqlUpdates {
			k, item := e.keys[rand.N(len(e.keys))], randomItem()
			code, v, err := e.get(k, item)
			if err != nil || code != http.StatusOK {
				continue
			}
			if code, _, err := e.patch(k, item, v); err == nil && code == http.StatusOK {
				apiPatches.Add(1)
			}
		}
	}()
	// Visitors: a read that starts after the key's floor reached f (the
	// invalidation of version f is applied) must not return a version below f.
	// The in-process L1 (hot keys, at most 500 ms) does not consult the
	// cache tier, and an invalidated value is the documented fallback when
	// the source cannot answer (detail=stale-invalidated: a busy box's
	// source refusing or timing out): both are counted apart.
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && sqlDone.Load() < sqlUpdates {
				k, item := e.keys[rand.N(len(e.keys))], randomItem()
				floor, _ := e.rdb.HGet(ctx, schema.RedisKey("catalog", k.tenant, item), schema.FieldFloor).Int64()
				code, v, cs, err := e.getStatus(k, item)
				if err != nil || code != http.StatusOK {
					continue // a killed serve process, or a 503 under load
				}
				if strings.Contains(cs, "detail=l1") {
					l1Reads.Add(1)
					continue
				}
				if strings.Contains(cs, "detail=stale-invalidated") {
					fallbacks.Add(1)
					continue
				}
				reads.Add(1)
				if v < floor {
					older.Add(1)
					olderDetail.Store(fmt.Sprintf("%s/%s: read version %d after floor %d was applied (Cache-Status %q)", k.tenant, item, v, floor, cs))
				}
			}
		}()
	}
	// Kill each component once with SIGKILL, and bring it back.
	for i, p := range []*proc{e.capture, e.applier, e.serve} {
		target := int64(sqlUpdates * (i + 1) / 4)
		testenv.Eventually(t, 3*time.Minute, fmt.Sprintf("%d SQL updates before killing %s", target, p.name), func() error {
			if n := sqlDone.Load(); n < target {
				return fmt.Errorf("%d done", n)
			}
			return nil
		})
		p.kill()
		t.Logf("killed %s after %d SQL updates", p.name, sqlDone.Load())
		p.start()
	}
	wg.Wait()
	t.Logf("%d SQL updates, %d API patches, %d checked reads, %d L1 reads, %d invalidated values answered while the source could not",
		sqlDone.Load(), apiPatches.Load(), reads.Load(), l1Reads.Load(), fallbacks.Load())
	if reads.Load() < 100 {
		t.Fatalf("only %d reads checked: the read check did not run", reads.Load())
	}
	if n := older.Load(); n > 0 {
		t.Errorf("%d reads returned a version older than an applied invalidation, e.g. %v", n, olderDetail.Load())
	}

	e.floorsMatchSource(2 * time.Minute)

	// The inspector finds nothing served past the SLO, nothing ahead of the
	// source, and every entry behind the source already invalidated.
	icfg := inspect.DefaultConfig()
	icfg.Redis, icfg.PG, icfg.Sample = e.redisURL, e.dsn, 10000
	rep, err := inspect.Run(context.Background(), icfg, testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked == 0 || rep.Violations != 0 || rep.Ahead != 0 {
		t.Fatalf("inspect: %+v", rep)
	}
	for _, f := range rep.Findings {
		if !f.Invalidated {
			t.Errorf("inspect: %s/%s cached %d, source %d, not invalidated after the pipeline caught up", f.Tenant, f.Item, f.CachedVersion, f.SourceVersion)
		}
	}
	t.Logf("inspect: checked %d, consistent %d, expired %d, behind %d", rep.Checked, rep.Consistent, rep.Expired, rep.Behind)

	// The gate: OK while everything runs; AT RISK once the applier has been
	// stopped longer than --warn; BREACHED past --slo. Checked through the
	// real binary, whose exit code is the contract.
	statusArgs := func(warn, slo string) []string {
		return []string{"status", "--kafka", e.brokers, "--redis", e.redisURL, "--topic", e.topic, "--group", e.group,
			"--pg", e.dsn, "--warn", warn, "--slo", slo}
	}
	exitOf := func(args ...string) (int, string) {
		out, err := exec.Command(testenv.Binary(t), args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		return 0, string(out)
	}
	testenv.Eventually(t, 30*time.Second, "status OK, the one serve process registered on the source", func() error {
		if code, out := exitOf(statusArgs("5s", "30s")...); code != 0 || !strings.Contains(out, "source readers  1 serve process (pool "+promise.SourcePool+", buckets ") {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
	e.applier.stop()
	testenv.Eventually(t, 30*time.Second, "status AT RISK with the applier stopped", func() error {
		if code, out := exitOf(statusArgs("4s", "8s")...); code != 1 || !bytes.Contains([]byte(out), []byte(status.AtRisk)) {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, "status BREACHED with the applier stopped", func() error {
		if code, out := exitOf(statusArgs("4s", "8s")...); code != 1 || !bytes.Contains([]byte(out), []byte(status.Breached)) {
			return fmt.Errorf("exit %d:\n%s", code, out)
		}
		return nil
	})
	if code, out := exitOf("status", "--kafka", e.brokers, "--redis", "redis://127.0.0.1:1/0", "--topic", e.topic, "--timeout", "2s"); code != 2 {
		t.Fatalf("status with an unreachable Redis: exit %d, want 2:\n%s", code, out)
	}
}

// floorsMatchSource waits until every item's floor in Redis equals its
// Postgres version: every change was applied.
func (e *e2e) floorsMatchSource(within time.Duration) {
	e.t.Helper()
	testenv.Eventually(e.t, within, "every floor equals the Postgres version", func() error {
		rows, err := e.pool.Query(context.Background(), `SELECT tenant_id, item_id, version FROM catalog.items`)
		if err != nil {
			return err
		}
		type kv struct {
			key string
			v   int64
		}
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv, error) {
			var t, i string
			var v int64
			err := r.Scan(&t, &i, &v)
			return kv{schema.RedisKey("catalog", t, i), v}, err
		})
		if err != nil {
			return err
		}
		cmds := make([]*redis.StringCmd, len(all))
		_, _ = e.rdb.Pipelined(context.Background(), func(p redis.Pipeliner) error {
			for i, x := range all {
				cmds[i] = p.HGet(context.Background(), x.key, schema.FieldFloor)
			}
			return nil
		})
		bad := 0
		var example string
		for i, x := range all {
			// Items never updated (version 1) have no event and need no floor.
			f, _ := cmds[i].Int64()
			if x.v > 1 && f != x.v {
				bad++
				example = fmt.Sprintf("%s floor %d, postgres %d", x.key, f, x.v)
			}
		}
		if bad > 0 {
			return fmt.Errorf("%d keys differ, e.g. %s", bad, example)
		}
		return nil
	})
}
