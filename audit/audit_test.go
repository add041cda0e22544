package audit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	t    *testing.T
	pool *pgxpool.Pool
	cc   *cache.Client
	srv  *api.Server
	r    *testenv.Redis
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvWith(t, api.DefaultConfig())
}

// newEnvWith runs the auditor's budget with scfg (the serve process's).
func newEnvWith(t *testing.T, scfg api.Config) *env {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	dsn := testenv.SharedPostgres(t).MigratedDatabase(t)
	pool, err := api.NewPool(ctx, dsn, api.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	r := testenv.StartRedis(t)
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: r.Client(t), Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := api.New(scfg, api.Deps{Pool: pool, Cache: cc, Redis: r.Client(t), Log: testenv.Logger(t),
		Clock: testenv.Clock(t, r.Client(t), pool)})
	if err != nil {
		t.Fatal(err)
	}
	// Served as `tidemark serve` serves it: registered on the source and
	// in its pool, the budget the auditor spends agreed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	testenv.Eventually(t, 30*time.Second, "the serve process is ready", func() error { return srv.Ready(context.Background()) })
	return &env{t: t, pool: pool, cc: cc, srv: srv, r: r}
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatal(err)
	}
}

// fill caches (tenant, item) at version through the lease protocol.
func (e *env) fill(tenant, item string, version int64) {
	e.t.Helper()
	ctx := context.Background()
	lr, err := e.cc.Lookup(ctx, tenant, item, 0)
	if err != nil || lr.Token.IsZero() {
		e.t.Fatalf("lookup %s/%s: %+v %v", tenant, item, lr, err)
	}
	if err := e.cc.Fill(ctx, tenant, item, lr.Token, version, []byte(`{"v": `+strconv.FormatInt(version, 10)+`}`), time.Now()); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) auditor(cfg audit.Config, reg prometheus.Registerer) *audit.Auditor {
	e.t.Helper()
	a, err := audit.New(cfg, audit.Deps{Redis: e.r.Client(e.t), DB: e.pool, Cache: e.cc, Budget: e.srv,
		Log: testenv.Logger(e.t), Registerer: reg})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = a.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return a
}

func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metric
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// A planted behind entry (the source moved a minute ago, no invalidation
// arrived) is found within one sweep and repaired: its floor is the source
// version, so a lookup no longer serves it. An entry ahead of its source and
// one cached under a tenant without such a row are reported by kind; the
// other 200 entries are consistent.
func TestAuditFindsAndRepairsPlantedEntries(t *testing.T) {
	e := newEnv(t)
	for i := range 200 {
		e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', $1, 1, '{"v":1}')`, "i"+strconv.Itoa(i))
		e.fill("acme", "i"+strconv.Itoa(i), 1)
	}
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'victim', 1, '{"v":1}'), ('acme', 'rolled', 2, '{"v":2}')`)
	e.fill("acme", "victim", 1)
	e.fill("acme", "rolled", 9)
	e.fill("nobody", "ghost", 3)
	e.exec(`UPDATE catalog.items SET version = 2, display = '{"v":2}', updated_at = now() - interval '1 minute' WHERE tenant_id = 'acme' AND item_id = 'victim'`)

	cfg := audit.DefaultConfig()
	cfg.Rate, cfg.Batch = 200, 20 // 203 entries: a sweep takes about a second
	reg := prometheus.NewRegistry()
	e.auditor(cfg, reg)
	start := time.Now()
	// The sweep is complete when every SCAN wrapped, before the batch that
	// wrapped is checked: wait for that batch too.
	testenv.Eventually(t, 20*time.Second, "one sweep", func() error {
		if s := counter(t, reg, "tidemark_audit_sweep_seconds"); s == 0 {
			return errors.New("no sweep completed")
		}
		if got := counter(t, reg, "tidemark_audit_checked_total"); got < 203 {
			return fmt.Errorf("checked = %v after a sweep, want >= 203", got)
		}
		return nil
	})
	sweep := counter(t, reg, "tidemark_audit_sweep_seconds")
	t.Logf("sweep took %.2fs, first finished after %s", sweep, time.Since(start))
	// The repaired entry is found once and never again; the other two cannot
	// be repaired, so the next sweep (already under way by now) may count
	// them again.
	if got := counter(t, reg, "tidemark_audit_violations_total", "kind", audit.KindBehindServable); got != 1 {
		t.Errorf("violations{%s} = %v after a sweep, want 1", audit.KindBehindServable, got)
	}
	for _, kind := range []string{audit.KindAhead, audit.KindWrongTenant} {
		if got := counter(t, reg, "tidemark_audit_violations_total", "kind", kind); got < 1 {
			t.Errorf("violations{%s} = %v after a sweep, want at least 1", kind, got)
		}
	}
	if got := counter(t, reg, "tidemark_audit_repairs_total"); got != 1 {
		t.Errorf("repairs = %v, want 1", got)
	}
	if got := counter(t, reg, "tidemark_audit_checked_total"); got < 203 {
		t.Errorf("checked = %v after a sweep, want >= 203", got)
	}
	lr, err := e.cc.Lookup(context.Background(), "acme", "victim", 0)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Status == cache.StatusHit {
		t.Errorf("the repaired entry is still served as a hit: %+v", lr)
	}
	if got := counter(t, reg, "tidemark_audit_tenant_keys", "tenant", "acme"); got != 202 {
		t.Errorf("tenant_keys{acme} = %v, want 202", got)
	}
	if got := counter(t, reg, "tidemark_audit_tenant_bytes", "tenant", "acme"); got < 202*20 {
		t.Errorf("tenant_bytes{acme} = %v, want at least 20 bytes per entry", got)
	}
}

// Writers commit and invalidate (as a healthy pipeline does, after the
// commit) while readers fill through the lease protocol: the auditor checks
// thousands of entries and reports no violation.
func TestAuditQuietOnHealthyPipelineUnderLoad(t *testing.T) {
	e := newEnv(t)
	const items = 300
	for i := range items {
		e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', $1, 1, '{}')`, "i"+strconv.Itoa(i))
	}
	cfg := audit.DefaultConfig()
	cfg.Rate, cfg.Batch = 1000, 50
	reg := prometheus.NewRegistry()
	e.auditor(cfg, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var errs sync.Map
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				item := "i" + strconv.Itoa(rand.IntN(items))
				var v int64
				err := e.pool.QueryRow(ctx, `UPDATE catalog.items SET version = version + 1, updated_at = now() WHERE tenant_id = 'acme' AND item_id = $1 RETURNING version`, item).Scan(&v)
				if err == nil {
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // capture, Kafka, applier
					_, err = e.cc.Invalidate(context.Background(), "acme", item, v)
				}
				if err != nil && ctx.Err() == nil {
					errs.Store(fmt.Sprint("writer ", w), err)
				}
			}
		}()
	}
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				item := "i" + strconv.Itoa(rand.IntN(items))
				lr, err := e.cc.Lookup(ctx, "acme", item, 0)
				if err != nil || lr.Token.IsZero() {
					continue
				}
				obs := time.Now()
				var v int64
				if err := e.pool.QueryRow(ctx, `SELECT version FROM catalog.items WHERE tenant_id = 'acme' AND item_id = $1`, item).Scan(&v); err != nil {
					continue
				}
				_ = e.cc.Fill(ctx, "acme", item, lr.Token, v, []byte(`{}`), obs) // a refused fill lost to an invalidation
			}
		}()
	}
	wg.Wait()
	errs.Range(func(k, v any) bool { t.Errorf("%v: %v", k, v); return true })
	checked := counter(t, reg, "tidemark_audit_checked_total")
	if checked < 1000 {
		t.Errorf("checked only %v entries", checked)
	}
	for _, kind := range []string{audit.KindBehindServable, audit.KindAhead, audit.KindWrongTenant, audit.KindContent} {
		if got := counter(t, reg, "tidemark_audit_violations_total", "kind", kind); got != 0 {
			t.Errorf("violations{%s} = %v on a healthy pipeline", kind, got)
		}
	}
	nines := counter(t, reg, "tidemark_audit_consistency_nines")
	t.Logf("checked %v entries, consistency nines %.2f", checked, nines)
	if nines < 3 {
		t.Errorf("consistency nines %.2f after %v clean checks", nines, checked)
	}
}
