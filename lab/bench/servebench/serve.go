// Package servebench is `tidemark-lab bench serve`: cache-hit GET throughput and
// latency of `tidemark serve` (run as a separate process, as in production)
// over a zipf key set, a closed-loop saturation step and open-loop steps
// below it, and the share of GETs that read the source.
package servebench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/migrations"
	"github.com/tidemark/tidemark/schema"
)

// Config drives `tidemark-lab bench serve`: a Go load generator against a
// `tidemark serve` process, cache-hit GETs over a zipf-distributed key set.
type Config struct {
	PG          string        // --pg; empty: start a private Postgres
	Redis       string        // --redis; empty: start a private redis-server
	Binary      string        // the tidemark executable that runs `serve`
	ServeArgs   []string      // --serve-arg: extra flags for serve (e.g. --l1-size=0)
	Items       int           // --items: size of the key set
	ZipfS       float64       // --zipf-s: zipf exponent (> 1)
	Warmup      time.Duration // --warmup: closed-loop warm-up before measuring
	Duration    time.Duration // --duration: length of each measured step
	Concurrency int           // --concurrency: connections of the closed-loop (saturation) step
	Workers     int           // --workers: connections of the open-loop steps
	Steps       []float64     // --steps: open-loop rates as fractions of the saturated rate
	// Climb (--climb): after the steps, serve's open loop and then the
	// /healthz ceiling's keep going up by this factor while they meet the
	// goal (at most maxClimbSteps more each), so each side's highest rate
	// within it is bracketed by one that is not; 0: no climbing.
	Climb   float64
	P99Goal time.Duration // --p99-goal: the latency goal the report checks
	Dir     string        // --dir: where Profile writes (created if missing)
	Profile bool          // --profile: serve writes its CPU profile of the whole run to Dir/serve.pprof
}

// DefaultConfig is `tidemark-lab bench serve` with no flags: 10,000 items,
// zipf 1.1, 10 s steps at 25-85% of the saturated rate, a 10 ms p99 goal.
func DefaultConfig() Config {
	return Config{Items: 10_000, ZipfS: 1.1, Warmup: 5 * time.Second, Duration: 10 * time.Second,
		Concurrency: 32, Workers: 128, Steps: []float64{0.25, 0.5, 0.7, 0.85}, Climb: 1.1, P99Goal: 10 * time.Millisecond}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Binary == "" {
		p.Add("Binary", "the tidemark executable is unknown")
	}
	if c.Items < 1 {
		p.Add("Items", "must be positive (got %d)", c.Items)
	}
	if !(c.ZipfS > 1) {
		p.Add("ZipfS", "must be greater than 1 (got %v)", c.ZipfS)
	}
	p.Positive("Duration", c.Duration)
	if c.Warmup < 0 {
		p.Add("Warmup", "must not be negative (got %s)", c.Warmup)
	}
	if c.Concurrency < 1 {
		p.Add("Concurrency", "must be positive (got %d)", c.Concurrency)
	}
	if c.Workers < 1 {
		p.Add("Workers", "must be positive (got %d)", c.Workers)
	}
	for _, s := range c.Steps {
		if !(s > 0) {
			p.Add("Steps", "must be positive fractions (got %v)", c.Steps)
			break
		}
	}
	if c.Climb != 0 && !(c.Climb > 1 && c.Climb <= 2) {
		p.Add("Climb", "must be a factor above 1 and at most 2, or 0 for no climbing (got %v)", c.Climb)
	}
	if c.Profile && c.Dir == "" {
		p.Add("Profile", "the profile is written to the directory: set it")
	}
	if (c.PG == "") != (c.Redis == "") {
		p.Add("Redis", "give both a Postgres and a Redis, or neither (then private servers are started)")
	}
	return p.Err()
}

// Row is one measured step.
type Row struct {
	Step        string
	Target      float64 // requests/s offered (0: closed loop)
	Rate        float64 // requests/s completed
	Requests    int64
	Errors      int64 // non-200 answers, transport errors, or sends the generator could not start
	P50, P99    time.Duration
	Max         time.Duration
	SourceShare float64 // source reads / GETs, from serve's metrics
	L1Share     float64 // L1 hits / GETs
	// CPU per request of each process a request runs through (/proc; 0:
	// not known, e.g. a redis-server the bench did not start), and the
	// socket reads redis-server made per request (INFO stats
	// total_reads_processed: its round trips, a pipeline counting once):
	// where a step's CPU goes.
	ServeCPU, RedisCPU, GenCPU time.Duration
	RedisReads                 float64
}

// Result is the result of a run.
type Result struct {
	Config Config // what was run
	Rows   []Row
	Best   *Row // the highest-rate open-loop step within the p99 goal
	// CeilingBest is the highest-rate open-loop /healthz step within the
	// p99 goal, at the same offered rates: what this box allows any handler.
	CeilingBest *Row
	// BestNext and CeilingNext: the lowest-rate step of the same kind
	// offered more than Best (CeilingBest) that missed the goal (nil: none),
	// so each side's limit lies between the two.
	BestNext, CeilingNext *Row
	P99Goal               time.Duration
	Setup                 string
	Profile               string // serve's CPU profile, when asked for
}

// WriteTable writes the report's table and the goal it checks.
func (r Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", r.Setup)
	b.WriteString("| step | offered req/s | achieved req/s | requests | errors | p50 | p99 | max | source reads / GET | L1 hits / GET | CPU µs / req: serve | redis-server | generator | Redis round trips / req |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Rows {
		target := "closed loop"
		if row.Target != 0 {
			target = fmt.Sprintf("%.0f", max(row.Target, -row.Target))
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %d | %d | %s | %s | %s | %.3f%% | %.1f%% | %s | %s | %s | %.3f |\n", row.Step, target, row.Rate, row.Requests,
			row.Errors, fmtDur(row.P50), fmtDur(row.P99), fmtDur(row.Max), 100*row.SourceShare, 100*row.L1Share,
			fmtMicros(row.ServeCPU), fmtMicros(row.RedisCPU), fmtMicros(row.GenCPU), row.RedisReads)
	}
	if sat, ceil := r.row("saturation"), r.row("ceiling /healthz"); sat != nil && ceil != nil && ceil.Rate > 0 {
		fmt.Fprintf(&b, "\nClosed loop: serve %.0f req/s against its own /healthz's %.0f req/s: **%.2fx**.\n", sat.Rate, ceil.Rate, sat.Rate/ceil.Rate)
	}
	if r.Best != nil {
		fmt.Fprintf(&b, "\nHighest offered rate with p99 < %s: **%.0f req/s** (p50 %s, p99 %s, source reads %.3f%% of GETs).\n",
			r.P99Goal, r.Best.Rate, fmtDur(r.Best.P50), fmtDur(r.Best.P99), 100*r.Best.SourceShare)
	} else {
		fmt.Fprintf(&b, "\nNo open-loop step met p99 < %s.\n", r.P99Goal)
	}
	if r.CeilingBest != nil {
		fmt.Fprintf(&b, "Ceiling, the same rates against /healthz: p99 < %s up to **%.0f req/s** (p99 %s)",
			r.P99Goal, r.CeilingBest.Rate, fmtDur(r.CeilingBest.P99))
		if r.Best != nil {
			ratio := r.Best.Rate / r.CeilingBest.Rate
			switch {
			case r.BestNext != nil && r.CeilingNext != nil:
				fmt.Fprintf(&b, "; serve reaches **%.2fx** of it, and the ratio of the two limits lies between %.2fx and %.2fx (each side's next step up, %.0f and %.0f req/s, missed the goal)",
					ratio, r.Best.Rate/r.CeilingNext.Rate, r.BestNext.Rate/r.CeilingBest.Rate, r.BestNext.Rate, r.CeilingNext.Rate)
			case r.BestNext != nil:
				fmt.Fprintf(&b, "; /healthz met the goal at every rate offered, so serve reaches **at most %.2fx** of it", r.BestNext.Rate/r.CeilingBest.Rate)
			case r.CeilingNext != nil:
				fmt.Fprintf(&b, "; serve met the goal at every rate offered, so it reaches **at least %.2fx** of it", r.Best.Rate/r.CeilingNext.Rate)
			default:
				fmt.Fprintf(&b, "; both met the goal at every rate offered, so the ratio is not established (%.2fx at the rates offered)", ratio)
			}
		}
		b.WriteString(".\n")
	} else if r.hasOpenCeiling() {
		fmt.Fprintf(&b, "Ceiling, the same rates against /healthz: no step met p99 < %s either; on this box the goal is out of reach for any handler.\n", r.P99Goal)
	}
	if r.Profile != "" {
		fmt.Fprintf(&b, "serve's CPU profile of the whole run (GET steps and /healthz ceiling): %s (go tool pprof -top %s)\n", r.Profile, r.Profile)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pickBest sets Best and CeilingBest: the highest-rate open-loop GET step
// and /healthz step that met the p99 goal without errors; and whether a
// step of the same kind offered more missed it.
func (r *Result) pickBest() {
	r.Best, r.CeilingBest = nil, nil
	for i := range r.Rows {
		row := &r.Rows[i]
		if !r.meets(*row) {
			continue
		}
		switch {
		case row.Target > 0 && (r.Best == nil || row.Rate > r.Best.Rate):
			r.Best = row
		case row.Target < 0 && (r.CeilingBest == nil || row.Rate > r.CeilingBest.Rate):
			r.CeilingBest = row
		}
	}
	r.BestNext, r.CeilingNext = nil, nil
	for i := range r.Rows {
		row := &r.Rows[i]
		if r.meets(*row) {
			continue
		}
		switch {
		case row.Target > 0 && r.Best != nil && row.Target > r.Best.Target && (r.BestNext == nil || row.Target < r.BestNext.Target):
			r.BestNext = row
		case row.Target < 0 && r.CeilingBest != nil && row.Target < r.CeilingBest.Target && (r.CeilingNext == nil || row.Target > r.CeilingNext.Target):
			r.CeilingNext = row
		}
	}
}

// meets reports whether a step met the p99 goal without errors.
func (r Result) meets(row Row) bool { return row.P99 < r.P99Goal && row.Errors == 0 }

// row is the row of step name (nil: none).
func (r Result) row(name string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Step == name {
			return &r.Rows[i]
		}
	}
	return nil
}

func (r Result) hasOpenCeiling() bool {
	return slices.ContainsFunc(r.Rows, func(row Row) bool { return row.Target < 0 })
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

func fmtMicros(d time.Duration) string {
	if d == 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond))
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Run starts what is missing (Postgres, Redis), seeds cfg.Items items,
// runs `tidemark serve` and measures it. A simulated healthy pipeline keeps
// the freshness watermark current (as the applier would), so unchanged hot
// items stay valid without re-reading the source: the steady state of
// docs/design.md. A failed run returns the steps it finished.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	deps = deps.OrDefaults()
	log, progress := deps.Log, deps.Progress
	redisPid := 0 // a redis-server the bench did not start is not measured
	if cfg.PG == "" {
		fmt.Fprintln(progress, "starting private Postgres and Redis ...")
		srv, err := bench.StartStack(ctx, "serve", log)
		if err != nil {
			return Result{}, fmt.Errorf("bench serve: %w", err)
		}
		defer srv.Stop()
		cfg.PG, cfg.Redis = srv.DSN, srv.Redis.URL()
		redisPid = srv.Redis.Pid()
	} else if _, err := migrations.Up(ctx, cfg.PG, log); err != nil {
		return Result{}, fmt.Errorf("bench serve: migrate: %w", err)
	}
	ns, tenant := bench.Namespace("bench"), "bench"
	key, err := bench.SeedTenant(ctx, cfg.PG, bench.PageItems(tenant, cfg.Items))
	if err != nil {
		return Result{}, fmt.Errorf("bench serve: %w", err)
	}

	// A healthy pipeline: the watermark follows the clock (applier's part).
	ropt, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return Result{}, fmt.Errorf("bench serve: Redis URL: %w", err)
	}
	ropt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	defer rdb.Del(context.WithoutCancel(ctx), schema.WatermarkKey(ns))
	wctx, stopWM := context.WithCancel(ctx)
	defer bench.KeepWatermarkCurrent(wctx, rdb, ns)()
	defer stopWM()

	var env []string
	if path := profilePath(cfg); path != "" {
		if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return Result{}, fmt.Errorf("bench serve: %w", err)
		}
		env = append(env, bench.ProfileEnv+"="+path)
	}
	srv, err := bench.StartServeEnv(ctx, env, cfg.Binary, cfg.PG, cfg.Redis, ns, cfg.ServeArgs...)
	if err != nil {
		return Result{}, fmt.Errorf("bench serve: %w", err)
	}
	defer srv.Stop()
	base, metricsURL := srv.API, srv.Metrics+"/metrics"
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096}, Timeout: 10 * time.Second}

	g := &generator{client: client, key: key, zipfS: cfg.ZipfS, metrics: metricsURL,
		rdb: rdb, pids: [3]int{srv.Pid(), redisPid, os.Getpid()}}
	for i := range cfg.Items {
		g.urls = append(g.urls, base+"/v1/catalog/items/"+benchItem(i))
	}
	rep := Result{Config: cfg, P99Goal: cfg.P99Goal, Profile: profilePath(cfg), Setup: fmt.Sprintf(
		"%d items (all read once first), zipf s=%.2f, GOMAXPROCS=%d on %d CPUs, generator and `tidemark serve` (separate processes) on the same box as Redis and Postgres; watermark kept current (healthy pipeline)",
		cfg.Items, cfg.ZipfS, runtime.GOMAXPROCS(0), runtime.NumCPU())}
	healthz := srv.Metrics + "/healthz"
	loadStart := loadAvg() // the box may be shared: say how busy it was
	// Steady state: every key has been read once, so what remains are
	// refreshes and invalidations, not first-time cold misses.
	fmt.Fprintf(progress, "priming all %d keys once ...\n", cfg.Items)
	g.prime(ctx, cfg.Concurrency)
	if cfg.Warmup > 0 {
		fmt.Fprintf(progress, "warm-up %s ...\n", cfg.Warmup)
		g.closed(ctx, cfg.Concurrency, cfg.Warmup)
	}
	fmt.Fprintf(progress, "closed loop, %d connections, %s ...\n", cfg.Concurrency, cfg.Duration)
	sat, err := g.measure(ctx, "saturation", func() (int64, []time.Duration) { return g.closed(ctx, cfg.Concurrency, cfg.Duration) }, 0)
	if err != nil {
		return rep, err
	}
	rep.Rows = append(rep.Rows, sat)
	fmt.Fprintf(progress, "  %.0f req/s, p50 %s, p99 %s\n", sat.Rate, fmtDur(sat.P50), fmtDur(sat.P99))
	// An open-loop step, serve's or (ceiling) /healthz's, at target req/s.
	open := func(ceiling bool, target float64) (Row, error) {
		name := fmt.Sprintf("open %.0f%%", 100*target/sat.Rate)
		if ceiling {
			name = "ceiling /healthz " + name
			fmt.Fprintf(progress, "ceiling: /healthz open loop at %.0f req/s ...\n", target)
		} else {
			fmt.Fprintf(progress, "open loop at %.0f req/s (%.0f%% of saturation), %s ...\n", target, 100*target/sat.Rate, cfg.Duration)
		}
		row, err := g.measure(ctx, name, func() (int64, []time.Duration) {
			return g.open(ctx, target, cfg.Workers, cfg.Duration)
		}, target)
		if err != nil {
			return row, err
		}
		fmt.Fprintf(progress, "  %.0f req/s, p50 %s, p99 %s, errors %d\n", row.Rate, fmtDur(row.P50), fmtDur(row.P99), row.Errors)
		if ceiling {
			row.Target = -target // a ceiling row: not a candidate for Best
		}
		rep.Rows = append(rep.Rows, row)
		return row, nil
	}
	var rates []float64 // serve's open-loop rates, which the ceiling is offered too
	var top Row         // the step at the highest of them, where climbing starts
	for _, f := range cfg.Steps {
		row, err := open(false, sat.Rate*f)
		if err != nil {
			return rep, err
		}
		rates = append(rates, row.Target)
		if row.Target > top.Target {
			top = row
		}
	}
	n := len(rep.Rows)
	if err := climb(cfg.Climb, top, top.Target, rep.meets, func(r float64) (Row, error) { return open(false, r) }); err != nil {
		return rep, err
	}
	for _, row := range rep.Rows[n:] {
		rates = append(rates, row.Target)
	}
	rep.Setup += fmt.Sprintf("; load average (1 min) %s at start, %s at end", loadStart, loadAvg())
	// Ceiling: the same generator against a trivial handler of the same
	// serve process, closed loop and at each open-loop rate.
	g.ceilingURL = healthz
	fmt.Fprintf(progress, "ceiling: serve's /healthz, closed loop ...\n")
	if row, err := g.measure(ctx, "ceiling /healthz", func() (int64, []time.Duration) { return g.closed(ctx, cfg.Concurrency, cfg.Duration) }, 0); err == nil {
		rep.Rows = append(rep.Rows, row)
	}
	// The ceiling at every offered rate of the GET steps: whether this box
	// (generator, serve, Redis and Postgres on the same cores) can hold the
	// p99 goal at a rate at all is the ceiling's answer, not serve's. Then
	// on up, so the ratio of the two limits is measured, not bounded.
	top = Row{}
	for _, target := range rates {
		row, err := open(true, target)
		if err != nil {
			top = Row{} // as the closed-loop ceiling: a failed scrape loses the row, not the run; no climbing
			break
		}
		if row.Target < top.Target {
			top = row
		}
	}
	_ = climb(cfg.Climb, top, -top.Target, rep.meets, func(r float64) (Row, error) { return open(true, r) })
	g.ceilingURL = ""
	rep.pickBest()
	return rep, ctx.Err()
}

// climb goes on from last, the step at the highest rate offered so far
// (top), by factor per step while the last one meets the goal: the limit
// is then between two measured rates. At most maxClimbSteps; factor 0, or
// no step yet (top 0): none.
func climb(factor float64, last Row, top float64, meets func(Row) bool, step func(rate float64) (Row, error)) error {
	for i := 0; factor > 1 && top > 0 && i < maxClimbSteps && meets(last); i++ {
		top *= factor
		var err error
		if last, err = step(top); err != nil {
			return err
		}
	}
	return nil
}

// maxClimbSteps bounds Config.Climb's steps on each side (10 s each by
// default): 1.1^8 is 2.1x the highest step.
const maxClimbSteps = 8

// profilePath is where serve writes its CPU profile ("" when not asked). It
// is complete once serve has stopped, when Run returns.
func profilePath(cfg Config) string {
	if !cfg.Profile {
		return ""
	}
	return filepath.Join(cfg.Dir, "serve.pprof")
}

func benchItem(i int) string { return "item-" + strconv.Itoa(i) }

// generator is the load generator: keep-alive HTTP/1.1 GETs of zipf keys.
type generator struct {
	client *http.Client
	key    string
	urls   []string
	// ceilingURL, when set, replaces the keys: serve's own /healthz, the
	// cheapest handler of the same process, as a ceiling for this box.
	ceilingURL string
	zipfS      float64
	metrics    string
	rdb        *redis.Client // the Redis serve uses: its command count
	pids       [3]int        // serve, redis-server (0: not the bench's), the generator (this process)
	errors     int64
	mu         sync.Mutex
}

func (g *generator) get(ctx context.Context, url string) bool {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+g.key)
	res, err := g.client.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode == 200
}

// url is the next request's URL: a zipf key, or the ceiling endpoint.
func (g *generator) url(z *mrand.Zipf) string {
	if g.ceilingURL != "" {
		return g.ceilingURL
	}
	return g.urls[z.Uint64()]
}

func (g *generator) zipf(seed uint64) *mrand.Zipf {
	return mrand.NewZipf(mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), g.zipfS, 1, uint64(len(g.urls)-1))
}

func (g *generator) fail(n int64) {
	g.mu.Lock()
	g.errors += n
	g.mu.Unlock()
}

// prime reads every key once.
func (g *generator) prime(ctx context.Context, conc int) {
	next := make(chan string)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range next {
				g.get(ctx, u)
			}
		}()
	}
	for _, u := range g.urls {
		next <- u
	}
	close(next)
	wg.Wait()
}

// closed runs conc connections back to back for d; latency is per request.
func (g *generator) closed(ctx context.Context, conc int, d time.Duration) (int64, []time.Duration) {
	end := time.Now().Add(d)
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := g.zipf(uint64(w) + uint64(time.Now().UnixNano()))
			for time.Now().Before(end) && ctx.Err() == nil {
				t := time.Now()
				if !g.get(ctx, g.url(z)) {
					g.fail(1)
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		}()
	}
	wg.Wait()
	return int64(d), slices.Concat(lat...)
}

// open offers rate requests/s for d regardless of how fast answers come, and
// measures each latency from when the request was due (no coordinated
// omission: a stalled server shows up as latency, not as a lower rate).
func (g *generator) open(ctx context.Context, rate float64, workers int, d time.Duration) (int64, []time.Duration) {
	due := make(chan time.Time, 1<<16)
	lat := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			z := g.zipf(uint64(w)*7919 + uint64(time.Now().UnixNano()))
			for t := range due {
				if !g.get(ctx, g.url(z)) {
					g.fail(1)
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		}()
	}
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	var sent int64
	tick := time.NewTicker(time.Millisecond)
	for now := start; now.Sub(start) < d && ctx.Err() == nil; now = <-tick.C {
		// Every request due by now, each stamped with its own due time.
		for next := start.Add(time.Duration(sent) * interval); !next.After(now); next = start.Add(time.Duration(sent) * interval) {
			select {
			case due <- next:
			default:
				g.fail(1) // the generator itself cannot keep up
			}
			sent++
		}
	}
	tick.Stop()
	close(due)
	wg.Wait()
	return int64(time.Since(start)), slices.Concat(lat...)
}

// measure runs one step and reads serve's counters around it.
func (g *generator) measure(ctx context.Context, name string, run func() (int64, []time.Duration), target float64) (Row, error) {
	before, err := g.scrape(ctx)
	if err != nil {
		return Row{}, err
	}
	g.mu.Lock()
	g.errors = 0
	g.mu.Unlock()
	cpu0, reads0 := g.usage(ctx)
	t0 := time.Now()
	_, lat := run()
	elapsed := time.Since(t0)
	cpu1, reads1 := g.usage(ctx)
	after, err := g.scrape(ctx)
	if err != nil {
		return Row{}, err
	}
	l := bench.Summarize(lat)
	row := Row{Step: name, Target: target, Requests: int64(len(lat)), Rate: float64(len(lat)) / elapsed.Seconds(),
		P50: l.P50, P99: l.P99, Max: l.Max}
	g.mu.Lock()
	row.Errors = g.errors
	g.mu.Unlock()
	if gets := after.gets - before.gets; gets > 0 {
		row.SourceShare = (after.sourceReads - before.sourceReads) / gets
		row.L1Share = (after.l1Hits - before.l1Hits) / gets
	}
	if n := row.Requests; n > 0 {
		per := func(i int) time.Duration {
			if cpu0[i] < 0 || cpu1[i] < 0 {
				return 0
			}
			return (cpu1[i] - cpu0[i]) / time.Duration(n)
		}
		row.ServeCPU, row.RedisCPU, row.GenCPU = per(0), per(1), per(2)
		if reads0 >= 0 && reads1 >= 0 {
			row.RedisReads = float64(reads1-reads0) / float64(n)
		}
	}
	return row, nil
}

// usage is the CPU each of g.pids has used so far (-1: not known) and the
// socket reads Redis has processed (-1: not known).
func (g *generator) usage(ctx context.Context) (cpu [3]time.Duration, reads int64) {
	for i, pid := range g.pids {
		cpu[i] = -1
		if pid > 0 {
			if d, err := bench.ProcCPU(pid); err == nil {
				cpu[i] = d
			}
		}
	}
	reads = -1
	if info, err := g.rdb.Info(ctx, "stats").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
				if n, err := strconv.ParseInt(v, 10, 64); err == nil {
					reads = n
				}
			}
		}
	}
	return cpu, reads
}

type serveCounters struct{ gets, sourceReads, l1Hits float64 }

// scrape sums serve's counters from its /metrics text.
func (g *generator) scrape(ctx context.Context) (serveCounters, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", g.metrics, nil)
	res, err := g.client.Do(req)
	if err != nil {
		return serveCounters{}, fmt.Errorf("bench serve: scrape serve metrics: %w", err)
	}
	defer res.Body.Close()
	var c serveCounters
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if i < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(line, "tidemark_api_requests_total{") && strings.Contains(line, `route="get_item"`):
			c.gets += v
		case strings.HasPrefix(line, "tidemark_api_source_reads_total{"):
			c.sourceReads += v
		case strings.HasPrefix(line, "tidemark_api_l1_hits_total"):
			c.l1Hits += v
		}
	}
	return c, sc.Err()
}

// loadAvg is the 1-minute load average ("?" where /proc is missing).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
