package warm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/warm"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one serve process's worth of parts against a real Postgres and
// redis-server: the API (serving HTTP, so its clock is measured and reads
// fill), the cache client, and the hot-set tracker counting its lookups.
type env struct {
	t      *testing.T
	pool   *pgxpool.Pool
	r      *testenv.Redis
	rdb    *redis.Client
	cc     *cache.Client
	srv    *api.Server
	apiReg *prometheus.Registry
	hot    *hotset.Tracker
	url    string
	key    string
	ctx    context.Context
}

func newEnv(t *testing.T, items int, acfg api.Config) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	t.Cleanup(func() { cancel(); bg.Wait() })
	run := func(f func(context.Context) error) {
		bg.Add(1)
		go func() { defer bg.Done(); _ = f(ctx) }()
	}
	dsn := testenv.SharedPostgres(t).MigratedDatabase(t)
	pool, err := api.NewPool(ctx, dsn, acfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'acme', 'i' || g, 1, '{"name":"an item"}' FROM generate_series(0, $1 - 1) g`, items); err != nil {
		t.Fatal(err)
	}
	key, err := api.CreateAPIKey(ctx, pool, "acme")
	if err != nil {
		t.Fatal(err)
	}
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	hcfg := hotset.DefaultConfig()
	hcfg.MergeInterval, hcfg.TimeConstant = 300*time.Millisecond, time.Minute
	hot, err := hotset.New(hcfg, hotset.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	apiReg := prometheus.NewRegistry()
	srv, err := api.New(acfg, api.Deps{Pool: pool, Cache: wiring.Counted{Cache: cc, T: hot}, Redis: rdb,
		Log: testenv.Logger(t), Registerer: apiReg, Clock: testenv.Clock(t, rdb, pool)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	run(func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	run(cc.Run)
	run(hot.Run)
	// A healthy pipeline: the watermark follows the clock (the applier's
	// part), so entries stay hits beyond their soft deadline.
	run(func(ctx context.Context) error {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			_ = cc.SetPartitions(ctx, 1)
			_ = cc.SetWatermark(ctx, 0, time.Now())
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
	})
	return &env{t: t, pool: pool, r: r, rdb: rdb, cc: cc, srv: srv, apiReg: apiReg, hot: hot,
		url: "http://" + ln.Addr().String(), key: key, ctx: ctx}
}

// get reads one item through the API and returns the HTTP status.
func (e *env) get(item string) (int, error) {
	req, err := http.NewRequestWithContext(e.ctx, "GET", e.url+"/v1/catalog/items/"+item, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+e.key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// heat makes i0..i(n-1) the hot set, i0 the hottest, and merges it.
func (e *env) heat(n int) {
	e.t.Helper()
	for i := range n {
		for range 2 * (n - i) {
			e.hot.Observe("acme", "i"+strconv.Itoa(i))
		}
	}
	if err := e.hot.Merge(e.ctx); err != nil {
		e.t.Fatal(err)
	}
}

// cached reports which of i(from)..i(to-1) the cache tier would serve as a
// hit. A miss takes the key's fill lease: call it only once warming is over.
func (e *env) cached(from, to int) (hits []int, misses []int) {
	e.t.Helper()
	for i := from; i < to; i++ {
		lr, err := e.cc.Lookup(e.ctx, "acme", "i"+strconv.Itoa(i), 0)
		if err != nil {
			e.t.Fatal(err)
		}
		if lr.Status == cache.StatusHit {
			hits = append(hits, i)
		} else {
			misses = append(misses, i)
		}
	}
	return hits, misses
}

// recorder is the API's background surface, recording the order in which
// the warmer first asks for each key (reads and fills go to the real API).
// A key asked for again is a retry after a budget refusal (the budget
// restarts empty after a loss, so the first reads of a run are refused) or
// a second run after the lease moved, which starts again from the hottest
// key: either way the key keeps its first place.
type recorder struct {
	*api.Server
	mu    sync.Mutex
	order []string
	seen  map[string]bool
}

func (r *recorder) Warm(ctx context.Context, tenant, item string) (api.WarmOutcome, error) {
	r.mu.Lock()
	if !r.seen[item] {
		if r.seen == nil {
			r.seen = map[string]bool{}
		}
		r.seen[item] = true
		r.order = append(r.order, item)
	}
	r.mu.Unlock()
	return r.Server.Warm(ctx, tenant, item)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.order
	r.order, r.seen = nil, nil
	return o
}

func (e *env) warmer(cfg warm.Config, src warm.Source) *prometheus.Registry {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	w, err := warm.New(cfg, warm.Deps{Redis: e.rdb, Cache: e.cc, Source: src, Log: testenv.Logger(e.t), Registerer: reg})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return reg
}

func sum(t *testing.T, regs []*prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	total := 0.0
	for _, r := range regs {
		total += testenv.Metric(t, r, name, labels...)
	}
	return total
}

// After every kind of loss, exactly one of two warmers (a lease) fills the
// hottest keys, hottest first, through the lease and fill path: every
// source read is charged to the background class, at no more than its rate,
// and the keys beyond Top are left to visitors. The redis-server restart is
// repeated because the lease lives on the lost node too: whichever process
// wins it back must still know that the tier was lost.
func TestWarmerRefillsHottestFirstAfterLoss(t *testing.T) {
	const hotKeys, top, bgRate = 300, 200, 150.0
	acfg := api.DefaultConfig()
	acfg.BackgroundRate = bgRate
	e := newEnv(t, 400, acfg)
	for i := range hotKeys {
		if code, err := e.get("i" + strconv.Itoa(i)); err != nil || code != 200 {
			t.Fatalf("priming read i%d: %d %v", i, code, err)
		}
	}
	e.heat(hotKeys)
	if hits, _ := e.cached(0, hotKeys); len(hits) != hotKeys {
		t.Fatalf("after priming %d of %d keys are cached", len(hits), hotKeys)
	}
	cfg := warm.DefaultConfig()
	cfg.Top, cfg.Workers, cfg.MaxRate, cfg.StartRate, cfg.Step = top, 2, bgRate, bgRate/4, bgRate/4
	cfg.CheckEvery, cfg.LeaseTTL, cfg.HotSetWait = 100*time.Millisecond, 2*time.Second, 10*time.Second
	recs := []*recorder{{Server: e.srv}, {Server: e.srv}}
	regs := []*prometheus.Registry{e.warmer(cfg, recs[0]), e.warmer(cfg, recs[1])}
	time.Sleep(3 * cfg.CheckEvery) // both observers have seen the tier before the loss: a baseline, not a trigger

	loss := func(name string, n, reads int, cause func()) float64 {
		t.Helper()
		runs := sum(t, regs, "tidemark_warm_runs_total")
		bg := testenv.Metric(t, e.apiReg, "tidemark_api_source_reads_total", "class", "background")
		fg := testenv.Metric(t, e.apiReg, "tidemark_api_source_reads_total", "class", "foreground")
		for _, rec := range recs {
			rec.take()
		}
		start := time.Now()
		cause()
		testenv.Eventually(t, 30*time.Second, name+": a warm run finishes", func() error {
			p, ok, err := warm.ReadProgress(e.ctx, e.rdb, cfg.Namespace)
			switch {
			case err != nil:
				return err
			case !ok || p.State != warm.StateDone || p.Started.Before(start):
				return fmt.Errorf("progress %+v", p)
			}
			return nil
		})
		took := time.Since(start)
		time.Sleep(5 * cfg.CheckEvery) // a second run, if any, would start now
		// One run per loss; two when the lease (lost with the node) went to
		// the other process mid-run: the first is interrupted.
		started := sum(t, regs, "tidemark_warm_runs_total") - runs
		if started < 1 || started > 2 {
			t.Errorf("%s: %v warm runs started, want 1 (or 2 when the lease moved mid-run)", name, started)
		}
		// The run that finished: the warmer that asked for the most keys
		// (an interrupted run on the same warmer is a prefix of the next).
		if started == 2 {
			t.Logf("%s: the lease moved; a run was interrupted", name)
		}
		var order []string
		for _, rec := range recs {
			if o := rec.take(); len(o) > len(order) {
				order = o
			}
		}
		if len(order) < n {
			t.Fatalf("%s: the warmer asked for %d keys, want %d", name, len(order), n)
		}
		// Hottest first: with 2 workers a key is asked for at most a couple
		// of places from its rank.
		for pos, item := range order[:n] {
			rank, _ := strconv.Atoi(item[1:])
			if rank > pos+2 || rank >= n {
				t.Fatalf("%s: key %d asked for %s (rank %d): not hottest first; order starts %v", name, pos, item, rank, order[:min(20, len(order))])
			}
		}
		// When the lease moved mid-run, the interrupted warmer's reads in
		// flight (one per worker) may hold their keys' fill leases as it
		// stops; the finishing run passes over a key another filler holds.
		// Those keys are filled by their next reader.
		want := n
		if started == 2 {
			want = n - 2
		}
		if hits, _ := e.cached(0, n); len(hits) < want && reads > 0 {
			t.Errorf("%s: %d of the %d hottest keys cached after the run", name, len(hits), n)
		}
		bgReads := testenv.Metric(t, e.apiReg, "tidemark_api_source_reads_total", "class", "background") - bg
		fgReads := testenv.Metric(t, e.apiReg, "tidemark_api_source_reads_total", "class", "foreground") - fg
		if bgReads < float64(reads-(n-want)) || fgReads != 0 {
			t.Errorf("%s: source reads background %v foreground %v, want >= %d background and no foreground", name, bgReads, fgReads, reads)
		}
		// The background class's rate is the ceiling: 200 reads at 150/s
		// take more than a second whatever the burst.
		if rate := bgReads / took.Seconds(); rate > bgRate*1.2 {
			t.Errorf("%s: %v background reads in %s = %.0f/s, above the class rate %v", name, bgReads, took, rate, bgRate)
		}
		t.Logf("%s: %v background reads, run finished %s after the loss", name, bgReads, took.Round(time.Millisecond))
		return started
	}
	for i := range 3 {
		name := fmt.Sprintf("redis-server restart %d", i+1)
		id0 := sum(t, regs, "tidemark_warm_runs_total", "reason", warm.ReasonIdentity)
		col0 := sum(t, regs, "tidemark_warm_runs_total", "reason", warm.ReasonCollapse)
		started := loss(name, top, top, func() { e.r.Restart(t) })
		// A restarted node has a new identity and no keys: the runs are
		// named by the identity, or by the collapse in a process whose
		// identity read failed at that check (seen at load 26); the
		// identity names at least one.
		id := sum(t, regs, "tidemark_warm_runs_total", "reason", warm.ReasonIdentity) - id0
		col := sum(t, regs, "tidemark_warm_runs_total", "reason", warm.ReasonCollapse) - col0
		if id < 1 || id+col != started {
			t.Errorf("%s: %v runs named %q and %v %q of %v started, want at least one of the first and no other reason", name, id, warm.ReasonIdentity, col, warm.ReasonCollapse, started)
		}
	}
	loss("FLUSHALL (key count collapse)", top, top, func() {
		if err := e.rdb.FlushAll(e.ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	// `tidemark warm --top 250`: the 50 keys beyond the run's Top are read;
	// the 200 cached ones are only looked up.
	loss("tidemark warm request", 250, 250-top, func() {
		if err := warm.Enqueue(e.ctx, e.rdb, cfg.Namespace, warm.Request{Top: 250, Tenant: "acme"}); err != nil {
			t.Fatal(err)
		}
	})
	if hits, _ := e.cached(250, hotKeys); len(hits) != 0 {
		t.Errorf("keys beyond the request's top 250 were cached: %v", hits)
	}
	// reset_at moved: entries observed before it stay hits until their own
	// soft deadline, so the run reads only what is no longer servable.
	loss("reset_at moved", top, 0, func() {
		if err := e.cc.SetResetAt(e.ctx, time.Now()); err != nil {
			t.Fatal(err)
		}
	})
	for _, reason := range []string{warm.ReasonCollapse, warm.ReasonResetAt, warm.ReasonRequested} {
		if got := sum(t, regs, "tidemark_warm_runs_total", "reason", reason); got < 1 {
			t.Errorf("runs{reason=%q} = %v, want at least 1", reason, got)
		}
	}
}

// The warmer halves its rate when source reads slow down (a lock holds the
// items table) and when foreground refusals rise (visitors' misses beyond
// the foreground budget), and steps back up once both recover.
func TestWarmerBacksOffAndResumes(t *testing.T) {
	const hotKeys = 3000
	acfg := api.DefaultConfig()
	acfg.ForegroundRate, acfg.BackgroundRate = 5, 400
	e := newEnv(t, hotKeys+1000, acfg)
	e.heat(hotKeys)
	cfg := warm.DefaultConfig()
	cfg.Top, cfg.Workers, cfg.MaxRate, cfg.StartRate, cfg.Step = hotKeys, 8, 400, 50, 50
	cfg.StepEvery, cfg.CheckEvery, cfg.LeaseTTL = 500*time.Millisecond, 100*time.Millisecond, time.Second
	reg := e.warmer(cfg, e.srv)
	gauge := func(name string) float64 { return testenv.Metric(t, reg, name) }
	backoffs := func(cause ...string) float64 {
		return testenv.Metric(t, reg, "tidemark_warm_backoffs_total", cause...)
	}
	climbed := func(over float64) func() error {
		return func() error {
			if r := gauge("tidemark_warm_rate_keys"); r < over {
				return fmt.Errorf("warm rate %v keys/s, want at least %v", r, over)
			}
			return nil
		}
	}
	if err := warm.Enqueue(e.ctx, e.rdb, cfg.Namespace, warm.Request{Top: hotKeys}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the warmer steps up while healthy", climbed(200))
	// A busy machine makes some reads slower than the best seen, and the
	// warmer rightly backs off for them too: what the slow phase must show
	// is back-offs beyond those.
	slowBefore := backoffs("cause", "slow_source")
	t.Logf("%v back-offs while healthy (a busy machine's slow reads)", backoffs())

	// Slow source: hold an exclusive lock on the items table for 600 ms at a
	// time.
	slowCtx, stopSlow := context.WithCancel(e.ctx)
	slowDone := make(chan struct{})
	go func() {
		defer close(slowDone)
		for slowCtx.Err() == nil {
			tx, err := e.pool.Begin(slowCtx)
			if err != nil {
				return
			}
			_, _ = tx.Exec(slowCtx, `LOCK TABLE catalog.items IN ACCESS EXCLUSIVE MODE`)
			time.Sleep(600 * time.Millisecond)
			_ = tx.Rollback(context.WithoutCancel(slowCtx))
			time.Sleep(50 * time.Millisecond)
		}
	}()
	testenv.Eventually(t, 15*time.Second, "the warmer backs off on slow source reads", func() error {
		if n := backoffs("cause", "slow_source"); n <= slowBefore {
			return fmt.Errorf("no back-off for slow source reads: %v, as many as before the slow phase", n)
		}
		return nil
	})
	slowRate := gauge("tidemark_warm_rate_keys")
	stopSlow()
	<-slowDone
	t.Logf("slow source: rate %v keys/s after backing off", slowRate)
	testenv.Eventually(t, 20*time.Second, "the warmer resumes once reads are fast again", climbed(slowRate+100))

	// Rising foreground refusals: visitors read cold keys (beyond the hot
	// set) ever faster, far beyond the 5/s foreground budget.
	before := backoffs("cause", "refusals")
	loadCtx, stopLoad := context.WithCancel(e.ctx)
	var load sync.WaitGroup
	load.Add(1)
	go func() {
		defer load.Done()
		next := hotKeys
		for step := 1; loadCtx.Err() == nil; step++ {
			var wg sync.WaitGroup
			for range min(10<<step, 2000) { // doubling: refusals rise well above the usual
				wg.Add(1)
				item := "i" + strconv.Itoa(next)
				next++
				go func() { defer wg.Done(); _, _ = e.get(item) }()
			}
			wg.Wait()
			t := time.NewTimer(200 * time.Millisecond)
			select {
			case <-loadCtx.Done():
			case <-t.C:
			}
		}
	}()
	testenv.Eventually(t, 15*time.Second, "the warmer backs off on rising foreground refusals", func() error {
		if backoffs("cause", "refusals") == before {
			return fmt.Errorf("no back-off; foreground refusals %v", e.srv.ForegroundRefusals())
		}
		return nil
	})
	refusedRate := gauge("tidemark_warm_rate_keys")
	stopLoad()
	load.Wait()
	t.Logf("rising foreground refusals (%v so far): rate %v keys/s after backing off", e.srv.ForegroundRefusals(), refusedRate)
	testenv.Eventually(t, 20*time.Second, "the warmer resumes once refusals stop rising", climbed(refusedRate+100))
}

// A warm read's lookups are the process's own, not demand: the hot set does
// not count them (a key asked for again after each budget refusal would
// otherwise climb past hotter ones), while a visitor's read counts.
func TestWarmReadsAreNotDemand(t *testing.T) {
	e := newEnv(t, 10, api.DefaultConfig())
	count := func(item string) float64 {
		for _, en := range e.hot.Top("acme", 100) {
			if en.Item == item {
				return en.Count
			}
		}
		return 0
	}
	for range 5 {
		if _, err := e.srv.Warm(e.ctx, "acme", "i1"); err != nil && !errors.Is(err, api.ErrBudget) {
			t.Fatal(err)
		}
	}
	if c := count("i1"); c != 0 {
		t.Fatalf("five warm reads of i1 counted %v reads of it in the hot set, want none", c)
	}
	testenv.Eventually(t, 10*time.Second, "a visitor's read answered", func() error {
		if code, err := e.get("i2"); err != nil || code != http.StatusOK {
			return fmt.Errorf("GET i2: %d %v", code, err)
		}
		return nil
	})
	if c := count("i2"); c < 1 {
		t.Fatalf("a visitor's read of i2 counted %v in the hot set, want at least 1", c)
	}
}
