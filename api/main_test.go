package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/clockguard"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/migrations"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// tenv is one test's Postgres database and Redis server.
type tenv struct {
	t     testing.TB
	dsn   string
	pool  *pgxpool.Pool
	redis *testenv.Redis
	http  *http.Client
}

func newEnv(t testing.TB) *tenv {
	t.Helper()
	return newEnvDSN(t, testenv.SharedPostgres(t).MigratedDatabase(t))
}

func newEnvDSN(t testing.TB, dsn string) *tenv {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	pool, err := NewPool(ctx, dsn, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 400}
	t.Cleanup(tr.CloseIdleConnections)
	return &tenv{t: t, dsn: dsn, pool: pool, redis: testenv.StartRedis(t), http: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// testCacheConfig is the design's cache config; tests shorten what they need.
func testCacheConfig() cache.Config { return cache.DefaultConfig() }

// newCache is a real cache client (its own Redis connections, as another
// process would have), with its watermark poller running.
func (e *tenv) newCache(ccfg cache.Config) *cache.Client {
	e.t.Helper()
	rdb, err := cache.ParseRedisURL(e.redis.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { rdb.Close() })
	cc, err := cache.New(ccfg, cache.Deps{Redis: rdb, Log: testenv.Logger(e.t), Registerer: nil})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = cc.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return cc
}

// instance is one serve process, in-process.
type instance struct {
	srv *Server
	url string
}

type instOpts struct {
	cfg  func(*Config)
	ccfg func(*cache.Config)
	// clockOffset shifts this instance's wall clock, as
	// TIDEMARK_TEST_CLOCK_OFFSET does for a process.
	clockOffset time.Duration
	// uncounted: the process never registers as a live serve process, as
	// one restarted while the presence key's master could not be reached.
	uncounted bool
	// tracer receives the instance's spans (nil: none).
	tracer trace.TracerProvider
	// unclaimed: the namespace's identity is not claimed, as before Serve
	// claims it (with uncounted: the reader's Run would claim it).
	unclaimed bool
}

func (e *tenv) instance(o instOpts) *instance {
	e.t.Helper()
	cfg := DefaultConfig()
	// A loaded CI box can take longer than the production bound for a
	// Lookup; the tests about a dead Redis set it back.
	cfg.LookupTimeout = time.Second
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	ccfg := testCacheConfig()
	if o.ccfg != nil {
		o.ccfg(&ccfg)
	}
	cc := e.newCache(ccfg)
	rdb, err := cache.ParseRedisURL(e.redis.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { rdb.Close() })
	clock := e.clock(rdb, o.clockOffset)
	srv, err := New(cfg, Deps{Pool: e.pool, Cache: cc, Redis: rdb, Log: testenv.Logger(e.t), Clock: clock, Tracer: o.tracer})
	if err != nil {
		e.t.Fatal(err)
	}
	if !o.unclaimed {
		if err := srv.rd.Claim(context.Background()); err != nil { // as Serve does
			e.t.Fatal(err)
		}
	}
	if !o.uncounted {
		// Registered as a live serve process, as Serve does.
		// Against an unmigrated database the registration on the source
		// fails, and Run registers once it is migrated, as in Serve.
		if err := srv.rd.Join(context.Background()); err != nil && migrations.Check(context.Background(), e.pool) == nil {
			e.t.Fatal(err)
		}
		pctx, pcancel := context.WithCancel(context.Background())
		pdone := make(chan struct{})
		go func() { _ = srv.rd.Run(pctx); close(pdone) }()
		e.t.Cleanup(func() { pcancel(); <-pdone })
	}
	// The source's name told to the cache client, as Serve does.
	sctx, scancel := context.WithCancel(context.Background())
	sdone := make(chan struct{})
	go func() { srv.runSource(sctx); close(sdone) }()
	e.t.Cleanup(func() { scancel(); <-sdone })
	hs := httptest.NewServer(srv.Handler())
	e.t.Cleanup(func() {
		hs.Close()
		srv.close()
	})
	return &instance{srv: srv, url: hs.URL}
}

// clock is a running clock guard, measured once before it is returned.
func (e *tenv) clock(rdb redis.UniversalClient, offset time.Duration) *clockguard.Guard {
	e.t.Helper()
	ccfg := clockguard.DefaultConfig()
	ccfg.Interval, ccfg.TestOffset = 200*time.Millisecond, offset
	g, err := clockguard.New(ccfg, clockguard.Deps{Redis: rdb, Postgres: e.pool, Log: testenv.Logger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	_ = g.Check(context.Background()) // the outcome is kept in g
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = g.Run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	if offset > -ccfg.Bound/2 && offset < ccfg.Bound/2 {
		// A good clock is trusted once a reading is conclusive; on a loaded
		// box the first may not be, and the tests about the cache must not
		// start with every read sent to the source.
		testenv.Eventually(e.t, 30*time.Second, "the clock guard trusts a good clock", func() error {
			if !g.Trusted() {
				return g.Ready(context.Background())
			}
			return nil
		})
	}
	return g
}

// apiKey creates a key for tenant.
func (e *tenv) apiKey(tenant string) string {
	e.t.Helper()
	k, err := CreateAPIKey(context.Background(), e.pool, tenant)
	if err != nil {
		e.t.Fatal(err)
	}
	return k
}

type resp struct {
	code   int
	header http.Header
	body   map[string]any
	raw    string
}

func (r resp) version() int64 {
	v, _ := r.body["version"].(float64)
	return int64(v)
}

// cacheStatus is the Cache-Status header without its ttl parameter (which
// depends on timing); a 200 must carry one.
func (r resp) cacheStatus() string {
	cs := r.header.Get("Cache-Status")
	base, ttl, found := strings.Cut(cs, "; ttl=")
	if r.code == 200 && (!found || strings.Contains(ttl, ";")) {
		return "no ttl at the end: " + cs
	}
	return base
}

func (r resp) current() int64 {
	v, _ := r.body["current_version"].(float64)
	return int64(v)
}

// do sends one request; headers alternate name, value.
func (e *tenv) do(method, url, key, body string, headers ...string) resp {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := e.http.Do(req)
	if err != nil {
		e.t.Errorf("%s %s: %v", method, url, err)
		return resp{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	r := resp{code: res.StatusCode, header: res.Header, raw: string(b)}
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &r.body); err != nil {
			e.t.Errorf("%s %s: body is not JSON: %q", method, url, b)
		}
	}
	return r
}

func (i *instance) item(id string) string { return i.url + "/v1/catalog/items/" + id }

// sourceReads counts source reads of this test's database, as Postgres saw
// them (pg_stat_statements), independent of the API's own counters.
func (e *tenv) sourceReads() int64 {
	e.t.Helper()
	var n int64
	err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE '%tidemark source read%'`).Scan(&n)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *tenv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.pool.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatal(err)
	}
}

func (e *tenv) count(sql string, args ...any) int64 {
	e.t.Helper()
	var n int64
	if err := e.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// metric is the value of one counter series of the instance's metrics
// (name and label values, in the order of its labels; 0 when absent).
func (i *instance) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := i.srv.reg.(prometheus.Gatherer).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for j, l := range m.GetLabel() {
				if l.GetValue() != labels[j] {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}
