// Package scan is the scan-isolation benchmark (`tidemark-lab bench scan`):
// tenant B reads its hot set (zipf) through real `tidemark serve` processes
// from a full cache (redis-server with a tight maxmemory and volatile-lru)
// while tenant A scans a large range of cold ids at its fair share of the
// source budget. The same run repeats the scan with each fill rate of
// FillRates (0: admission off), so the report shows what second-hit
// admission does for B's hit ratio before, during and after the scan.
package scanbench

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/seed"
)

// Config of one run.
type Config struct {
	Binary         string        // the tidemark executable that runs `serve`
	HotItems       int           // tenant B's items, read with a zipf distribution
	Zipf           float64       // zipf exponent of B's reads (> 1)
	Clients        int           // B's concurrent GET loops
	ColdIDs        int           // distinct cold ids tenant A scans, each once
	Scanners       int           // A's concurrent GET loops
	ValueBytes     int           // padding of every item's value
	Serves         int           // serve processes (both tenants spread over them)
	ForegroundRate float64       // source budget of the request path, reads/s; A scans at half (its share of two tenants)
	FillRates      []float64     // serve's fill rate per arm, fills/s per process (0: admission off)
	Headroom       int64         // bytes of maxmemory above what B's warmed hot set uses
	Baseline       time.Duration // B alone before the scan
	After          time.Duration // B alone after the scan
	GoalDrop       float64       // largest drop of B's hit ratio, in points, with admission
}

// DefaultConfig is sized for a small shared box. The cache holds B's 2,000
// hot items and 1 MiB more (about 2,700 entries), so the admission arm's
// fill rate is scaled down with it: a fill share is small or large against
// the cache it fills. 20 fills/s is 0.7 % of this cache a second; the
// product's 2,000 fills/s per process against a node of a million or more
// entries is under 0.2 %. The product's default is an arm of its own: on a
// box where A's share of the source budget is below it, admission never
// engages there.
func DefaultConfig() Config {
	return Config{HotItems: 2000, Zipf: 1.1, Clients: 8, ColdIDs: 100_000, Scanners: 16, ValueBytes: 1000, Serves: 1,
		ForegroundRate: 2000, FillRates: []float64{20, api.DefaultConfig().FillRate, 0}, Headroom: 1 << 20,
		Baseline: 10 * time.Second, After: 10 * time.Second, GoalDrop: 5}
}

// Validate reports every problem at once, by field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Binary == "" {
		p.Add("Binary", "the tidemark executable is unknown")
	}
	if c.HotItems < 10 {
		p.Add("HotItems", "must be at least 10 (got %d)", c.HotItems)
	}
	if c.ColdIDs < 1 {
		p.Add("ColdIDs", "must be positive (got %d)", c.ColdIDs)
	}
	for name, n := range map[string]int{"Clients": c.Clients, "Scanners": c.Scanners, "Serves": c.Serves} {
		if n < 1 {
			p.Add(name, "must be positive (got %d)", n)
		}
	}
	if c.ValueBytes < 0 {
		p.Add("ValueBytes", "must not be negative (got %d)", c.ValueBytes)
	}
	if !(c.Zipf > 1) {
		p.Add("Zipf", "must be greater than 1 (got %v)", c.Zipf)
	}
	bench.ServeProblems(&p, func(a *api.Config) { a.ForegroundRate = c.ForegroundRate }, map[string]string{"ForegroundRate": "ForegroundRate"})
	if len(c.FillRates) == 0 {
		p.Add("FillRates", "must name at least one arm")
	}
	for _, f := range c.FillRates {
		bench.ServeProblems(&p, func(a *api.Config) { a.FillRate = f }, map[string]string{"FillRate": "FillRates"})
	}
	if c.Headroom < 1 {
		p.Add("Headroom", "must be positive (got %d)", c.Headroom)
	}
	p.Positive("Baseline", c.Baseline)
	p.Positive("After", c.After)
	if !(c.GoalDrop > 0) {
		p.Add("GoalDrop", "must be positive (got %v)", c.GoalDrop)
	}
	return p.Err()
}

// Phase is tenant B's reads over one phase of an arm.
type Phase struct {
	Hits, Reads, Errors int64
}

// Ratio is the hit ratio (0 without reads).
func (p Phase) Ratio() float64 {
	if p.Reads == 0 {
		return 0
	}
	return float64(p.Hits) / float64(p.Reads)
}

// Arm is one scan at one fill rate.
type Arm struct {
	FillRate              float64 // fills/s per process (0: admission off)
	Before, During, After Phase
	Scanned, ScanErrors   int64         // ids A read (200) and ids it gave up on
	ScanRetries           int64         // A's reads refused with 503 and asked again
	ScanStored            int64         // A's reads whose fill was cached (Cache-Status "stored")
	ScanTime              time.Duration // from the first to the last of A's reads
	SourceReads           int64         // during the scan, from pg_stat_statements
	Evicted               int64         // keys redis-server evicted during the scan (INFO stats evicted_keys)
	Skipped               float64       // fills skipped by admission (tidemark_api_fills_skipped_total{reason="admission"})
	MaxMemory             int64         // the maxmemory set for the arm
}

// Drop is how many points B's hit ratio fell from before to during the scan.
func (a Arm) Drop() float64 { return 100 * (a.Before.Ratio() - a.During.Ratio()) }

// Rate is A's scan rate, ids/s.
func (a Arm) Rate() float64 {
	if a.ScanTime <= 0 {
		return 0
	}
	return float64(a.Scanned+a.ScanErrors) / a.ScanTime.Seconds()
}

// Result of a run.
type Result struct {
	Config Config // what was run
	Arms   []Arm
	Setup  string
}

const (
	hotTenant  = "steady"
	scanTenant = "scanner"
)

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Run runs every arm against private servers. A failed run returns the arms
// it finished.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	deps = deps.OrDefaults()
	log, progress := deps.Log, deps.Progress
	res := Result{Config: cfg}
	fmt.Fprintln(progress, "starting private Postgres and redis-server ...")
	srv, err := bench.StartStack(ctx, "scan", log)
	if err != nil {
		return res, fmt.Errorf("bench scan: %w", err)
	}
	defer srv.Stop()
	pool := srv.Pool
	fmt.Fprintf(progress, "seeding %d hot and %d cold items ...\n", cfg.HotItems, cfg.ColdIDs)
	for _, s := range []struct {
		tenant, prefix string
		n              int
	}{{hotTenant, "h", cfg.HotItems}, {scanTenant, "c", cfg.ColdIDs}} {
		if err := (seed.Items{Tenant: s.tenant, Prefix: s.prefix, Count: s.n,
			Display: fmt.Sprintf("jsonb_build_object('text', repeat('x', %d))", cfg.ValueBytes)}).Insert(ctx, pool); err != nil {
			return res, fmt.Errorf("bench scan: seed: %w", err)
		}
	}
	keyA, err := api.CreateAPIKey(ctx, pool, scanTenant)
	if err != nil {
		return res, fmt.Errorf("bench scan: %w", err)
	}
	keyB, err := api.CreateAPIKey(ctx, pool, hotTenant)
	if err != nil {
		return res, fmt.Errorf("bench scan: %w", err)
	}
	res.Setup = fmt.Sprintf("tenant B: %d hot items, zipf s=%.2f, %d closed-loop clients; tenant A: %d distinct cold ids, each read once, paced at %.0f/s "+
		"(its fair share of the %.0f/s source budget) by %d clients; values of %d bytes; %d `tidemark serve` process(es) (L1 off, auditor and warmer off, "+
		"entries valid for the whole run); redis-server with maxmemory = B's warmed hot set + %d KiB, volatile-lru; B alone %s before and %s after the scan",
		cfg.HotItems, cfg.Zipf, cfg.Clients, cfg.ColdIDs, cfg.ForegroundRate/2, cfg.ForegroundRate, cfg.Scanners, cfg.ValueBytes, cfg.Serves,
		cfg.Headroom>>10, cfg.Baseline, cfg.After)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Redis.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	for _, f := range cfg.FillRates {
		fmt.Fprintf(progress, "arm: fill rate %s\n", fillRate(f))
		a, err := arm(ctx, cfg, srv, pool, rdb, keyA, keyB, f, progress)
		if err != nil {
			return res, err
		}
		res.Arms = append(res.Arms, a)
	}
	return res, nil
}

func arm(ctx context.Context, cfg Config, srv *bench.Stack, pool *pgxpool.Pool, rdb *redis.Client, keyA, keyB string, fill float64, progress io.Writer) (Arm, error) {
	a := Arm{FillRate: fill}
	// A fresh cache without a memory limit, so B's whole hot set fits.
	for _, c := range [][]any{{"flushall"}, {"config", "set", "maxmemory", "0"}, {"config", "set", "maxmemory-policy", "noeviction"}} {
		if err := rdb.Do(ctx, c...).Err(); err != nil {
			return a, fmt.Errorf("bench scan: redis %v: %w", c, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := bench.Namespace("scan")
	defer bench.KeepWatermarkCurrent(ctx, rdb, ns)()
	defer cancel()

	// The watermark keeper keeps entries valid (deadlines move with it) and
	// the physical TTL outlasts the arm, so what B misses was evicted, not
	// expired.
	procs, stop, err := bench.StartServes(ctx, cfg.Serves, cfg.Binary, srv.DSN, srv.Redis.URL(), ns,
		"--l1-size", "0", "--audit-rate", "0", "--warm-top", "0", "--request-timeout", "5s", "--source-timeout", "5s",
		"--fill-rate", strconv.FormatFloat(fill, 'f', -1, 64),
		"--source-foreground-rate", strconv.FormatFloat(cfg.ForegroundRate, 'f', -1, 64), "--cache-max-age", "1h")
	if err != nil {
		return a, fmt.Errorf("bench scan: %w", err)
	}
	defer stop()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients + cfg.Scanners}}
	get := func(ctx context.Context, n int, key, id string) (status int, cacheStatus string, err error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", procs[n%len(procs)].API+"/v1/catalog/items/"+id, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Cache-Status"), nil
	}

	// Warm B's hot set: every item twice (the second read caches what a
	// first one left to admission), then until a pass is all hits.
	fmt.Fprintf(progress, "  warming B's %d hot items ...\n", cfg.HotItems)
	for pass := 0; ; pass++ {
		hits := 0
		for i := range cfg.HotItems {
			code, cs, err := get(ctx, i, keyB, "h"+strconv.Itoa(i))
			if err != nil {
				return a, fmt.Errorf("bench scan: warm B: %w", err)
			}
			if code == http.StatusOK && strings.HasPrefix(cs, "tidemark; hit") {
				hits++
			}
		}
		if hits == cfg.HotItems {
			break
		}
		if pass == 5 {
			return a, fmt.Errorf("bench scan: B's hot set is not cached after %d passes (%d of %d hits)", pass+1, hits, cfg.HotItems)
		}
	}
	used, err := infoInt(ctx, rdb, "memory", "used_memory")
	if err != nil {
		return a, err
	}
	a.MaxMemory = used + cfg.Headroom
	for _, c := range [][]any{{"config", "set", "maxmemory-policy", "volatile-lru"}, {"config", "set", "maxmemory", a.MaxMemory}, {"config", "resetstat"}} {
		if err := rdb.Do(ctx, c...).Err(); err != nil {
			return a, fmt.Errorf("bench scan: redis %v: %w", c, err)
		}
	}

	// B reads throughout; each phase swaps the counters out.
	var hits, reads, errs atomic.Int64
	var load sync.WaitGroup
	defer load.Wait()
	defer cancel()
	for c := range cfg.Clients {
		load.Add(1)
		go func() {
			defer load.Done()
			z := mrand.NewZipf(mrand.New(mrand.NewPCG(uint64(c), uint64(time.Now().UnixNano()))), cfg.Zipf, 1, uint64(cfg.HotItems-1))
			for ctx.Err() == nil {
				code, cs, err := get(ctx, c, keyB, "h"+strconv.FormatUint(z.Uint64(), 10))
				if ctx.Err() != nil {
					return
				}
				reads.Add(1)
				switch {
				case err != nil || code != http.StatusOK:
					errs.Add(1)
				case strings.HasPrefix(cs, "tidemark; hit"):
					hits.Add(1)
				}
			}
		}()
	}
	phase := func() Phase { return Phase{Hits: hits.Swap(0), Reads: reads.Swap(0), Errors: errs.Swap(0)} }
	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	phase()
	if err := wait(cfg.Baseline); err != nil {
		return a, err
	}
	a.Before = phase()
	fmt.Fprintf(progress, "  B's hit ratio before the scan %.1f %%; A scans %d cold ids ...\n", 100*a.Before.Ratio(), cfg.ColdIDs)

	src0, err := bench.SourceReads(ctx, pool)
	if err != nil {
		return a, fmt.Errorf("bench scan: %w", err)
	}
	start := time.Now()
	scanned, scanErrs, retried, stored := scanCold(ctx, cfg, get, keyA)
	a.ScanTime = time.Since(start)
	a.During = phase()
	a.Scanned, a.ScanErrors, a.ScanRetries, a.ScanStored = scanned, scanErrs, retried, stored
	if ctx.Err() != nil {
		return a, ctx.Err()
	}
	src1, err := bench.SourceReads(ctx, pool)
	if err != nil {
		return a, fmt.Errorf("bench scan: %w", err)
	}
	a.SourceReads = src1 - src0
	if a.Evicted, err = infoInt(ctx, rdb, "stats", "evicted_keys"); err != nil {
		return a, err
	}
	fmt.Fprintf(progress, "  scan took %s; B's hit ratio during it %.1f %%\n", a.ScanTime.Round(100*time.Millisecond), 100*a.During.Ratio())
	if err := wait(cfg.After); err != nil {
		return a, err
	}
	a.After = phase()
	for _, p := range procs {
		v, err := p.Counter("tidemark_api_fills_skipped_total", `reason="admission"`)
		if err != nil {
			return a, fmt.Errorf("bench scan: %w", err)
		}
		a.Skipped += v
	}
	return a, nil
}

// scanCold reads every cold id once, paced at A's share of the source
// budget.
func scanCold(ctx context.Context, cfg Config, get func(context.Context, int, string, string) (int, string, error), key string) (ok, failed, retried, stored int64) {
	ids := make(chan int, cfg.Scanners)
	var okN, failN, retries, storedN atomic.Int64
	var wg sync.WaitGroup
	for w := range cfg.Scanners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ids {
				// A refusal (503: over the share of the budget, or a
				// timeout on a busy box) is retried a few times, as a
				// client would; the id is counted as failed after that.
				for try := 1; ; try++ {
					code, cs, err := get(ctx, w, key, "c"+strconv.Itoa(i))
					if err == nil && code == http.StatusOK {
						okN.Add(1)
						if strings.Contains(cs, "; stored") {
							storedN.Add(1)
						}
						break
					}
					if try == scanTries || ctx.Err() != nil || (err == nil && code != http.StatusServiceUnavailable) {
						failN.Add(1)
						break
					}
					retries.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	// Open loop: id i is due at start + i/rate; a stalled server makes the
	// send wait (every id is read), which shows as a lower achieved rate.
	interval := time.Duration(float64(time.Second) / (cfg.ForegroundRate / 2))
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	next := 0
	for next < cfg.ColdIDs && ctx.Err() == nil {
		for ; next < cfg.ColdIDs && !start.Add(time.Duration(next)*interval).After(time.Now()); next++ {
			select {
			case ids <- next:
			case <-ctx.Done():
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	close(ids)
	wg.Wait()
	return okN.Load(), failN.Load(), retries.Load(), storedN.Load()
}

// scanTries is how often A asks for one id before counting it as failed.
const scanTries = 10

// infoInt is one integer field of a section of redis-server's INFO.
func infoInt(ctx context.Context, rdb *redis.Client, section, field string) (int64, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, fmt.Errorf("bench scan: INFO %s: %w", section, err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("bench scan: no %s in INFO %s", field, section)
}

// WriteTable writes the report: a row per arm and the goal judged for each
// admission arm.
func (r Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	cfg := r.Config
	fmt.Fprintf(&b, "%s\n\n", r.Setup)
	fmt.Fprintln(&b, "| fill rate /s per process | ids scanned (given up; 503s retried) | scan time | A's rate /s | B hit ratio before | during | after | drop during, points | B errors | A's ids cached | evicted keys | source reads | fills skipped by admission (A and B) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, a := range r.Arms {
		fmt.Fprintf(&b, "| %s | %d (%d; %d) | %s | %.0f | %.1f %% | %.1f %% | %.1f %% | %.1f | %d | %d | %d | %d | %.0f |\n",
			fillRate(a.FillRate), a.Scanned, a.ScanErrors, a.ScanRetries, a.ScanTime.Round(100*time.Millisecond), a.Rate(),
			100*a.Before.Ratio(), 100*a.During.Ratio(), 100*a.After.Ratio(), a.Drop(),
			a.Before.Errors+a.During.Errors+a.After.Errors, a.ScanStored, a.Evicted, a.SourceReads, a.Skipped)
	}
	fmt.Fprintln(&b)
	for _, a := range r.Arms {
		if a.FillRate == 0 {
			continue
		}
		verdict := "met"
		if a.Drop() > cfg.GoalDrop {
			verdict = "NOT met"
		}
		fmt.Fprintf(&b, "Goal (B's hit ratio drops at most %.0f points during the scan) with fill rate %s: %s (%.1f points).\n",
			cfg.GoalDrop, fillRate(a.FillRate), verdict, a.Drop())
	}
	_, err := io.WriteString(w, b.String()+"\n")
	return err
}

func fillRate(f float64) string {
	if f == 0 {
		return "0 (admission off)"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
