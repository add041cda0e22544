// Package warm is the warm-up benchmark (`tidemark-lab bench warm`): zipf reads
// through two real `tidemark serve` processes against a private Postgres and
// redis-server (no persistence). The redis-server is killed under load and
// restarted empty twice in the same run, first with the serve processes'
// warmers off and then on. Each time the harness measures how long the hit
// ratio takes to get back to 90 % of what it was before the kill, the source
// reads per second (counted by pg_stat_statements) against the budget, and
// the share of 503s before and after that point.
package warmbench

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
	Items          int           // catalog items, one tenant
	Zipf           float64       // zipf exponent of the reads (> 1)
	Clients        int           // concurrent GET loops
	Serves         int           // serve processes
	ForegroundRate float64       // source budget of the request path, reads/s over all serve processes
	BackgroundRate float64       // background class, reads/s (the warmer's ceiling)
	WarmTop        int           // hottest keys the warmer fills
	Prime          bool          // read every item once before the load, so the cache holds the whole catalog before the kill
	Warmup         time.Duration // load before each kill
	Observe        time.Duration // how long each arm watches the recovery
	Window         time.Duration // hit-ratio and source-rate window
}

// DefaultConfig is sized for a small shared box: a foreground budget well
// below the miss rate right after the kill, so the misses refill the cache
// slowly and the background class is what can make the difference.
func DefaultConfig() Config {
	return Config{Items: 20000, Zipf: 1.1, Clients: 16, Serves: 2, ForegroundRate: 100, BackgroundRate: 400, WarmTop: 5000,
		Warmup: 30 * time.Second, Observe: 60 * time.Second, Window: time.Second}
}

// Validate reports every problem at once, by field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Binary == "" {
		p.Add("Binary", "the tidemark executable is unknown")
	}
	if c.Items < 100 {
		p.Add("Items", "must be at least 100 (got %d)", c.Items)
	}
	for name, n := range map[string]int{"Clients": c.Clients, "Serves": c.Serves, "WarmTop": c.WarmTop} {
		if n < 1 {
			p.Add(name, "must be positive (got %d)", n)
		}
	}
	if !(c.Zipf > 1) {
		p.Add("Zipf", "must be greater than 1 (got %v)", c.Zipf)
	}
	bench.ServeProblems(&p, func(a *api.Config) { a.ForegroundRate, a.BackgroundRate = c.ForegroundRate, c.BackgroundRate },
		map[string]string{"ForegroundRate": "ForegroundRate", "BackgroundRate": "BackgroundRate"})
	if c.Warmup < 5*time.Second {
		p.Add("Warmup", "must be at least 5s: the hot set merges every 5 s (got %s)", c.Warmup)
	}
	if c.Window < 100*time.Millisecond {
		p.Add("Window", "must be at least 100ms (got %s)", c.Window)
	}
	if c.Observe < c.Window {
		p.Add("Observe", "must be at least one window (got %s)", c.Observe)
	}
	return p.Err()
}

// Arm is one kill and recovery.
type Arm struct {
	Warmer      bool
	HitBefore   float64       // hit ratio over the last 3 windows before the kill
	TimeTo90    time.Duration // from the kill until a window's hit ratio is back to 90 % of HitBefore
	Reached     bool
	PeakSource  float64 // source reads/s, highest window after the kill
	MeanSource  float64 // source reads/s over the observation
	Before503   float64 // share of 503s over the last 3 windows before the kill
	Unavail     float64 // share of 503s from the kill until TimeTo90 (the whole observation if not reached)
	After503    float64 // share of 503s after TimeTo90
	Late503     float64 // share of 503s over the second half of the observation (the warmer done or backed off)
	ReqRate     float64 // GETs/s after the kill
	Windows     []Window
	WarmedKeys  float64 // tidemark_warm_keys_total{result="filled"} over the serve processes
	WarmBackoff float64 // tidemark_warm_backoffs_total over the serve processes
}

// Window is one window's counts after the kill.
type Window struct {
	At           time.Duration // since the kill
	Hits, Total  int64
	Unavail      int64
	SourcePerSec float64
}

// Result of a run.
type Result struct {
	Config Config // what was run
	Arms   []Arm
	Budget float64 // foreground + background reads/s
	Setup  string
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Run runs both arms against private servers. A failed run returns the arms
// it finished.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	deps = deps.OrDefaults()
	log, progress := deps.Log, deps.Progress
	res := Result{Config: cfg, Budget: cfg.ForegroundRate + cfg.BackgroundRate}
	fmt.Fprintln(progress, "starting private Postgres and redis-server (no persistence) ...")
	srv, err := bench.StartStack(ctx, "warm", log)
	if err != nil {
		return res, fmt.Errorf("bench warm: %w", err)
	}
	defer srv.Stop()
	pool := srv.Pool
	if err := (seed.Items{Tenant: "bench", Prefix: "i", Count: cfg.Items,
		Display: "jsonb_build_object('name', 'Item ' || n, 'text', repeat('lorem ipsum ', 20))"}).Insert(ctx, pool); err != nil {
		return res, fmt.Errorf("bench warm: seed: %w", err)
	}
	key, err := api.CreateAPIKey(ctx, pool, "bench")
	if err != nil {
		return res, fmt.Errorf("bench warm: %w", err)
	}
	res.Setup = fmt.Sprintf("%d items of one tenant, zipf s=%.2f, %d closed-loop clients over %d `tidemark serve` processes (L1 off, auditor off); "+
		"source budget %.0f/s foreground + %.0f/s background; warmer top %d; windows of %s",
		cfg.Items, cfg.Zipf, cfg.Clients, cfg.Serves, cfg.ForegroundRate, cfg.BackgroundRate, cfg.WarmTop, cfg.Window)
	if cfg.Prime {
		res.Setup += "; every item read once before the load (the whole catalog cached before the kill)"
	}
	for _, warmer := range []bool{false, true} {
		fmt.Fprintf(progress, "arm: warmer %s\n", onOff(warmer))
		a, err := arm(ctx, cfg, srv, pool, key, warmer, progress)
		if err != nil {
			return res, err
		}
		res.Arms = append(res.Arms, a)
	}
	return res, nil
}

func arm(ctx context.Context, cfg Config, srv *bench.Stack, pool *pgxpool.Pool, key string, warmer bool, progress io.Writer) (Arm, error) {
	a := Arm{Warmer: warmer}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ns := bench.Namespace("warm")

	// A healthy pipeline: the watermark follows the clock (the applier's
	// part), also right after the kill, so entries stay servable.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Redis.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	defer bench.KeepWatermarkCurrent(ctx, rdb, ns)()
	defer cancel()

	warmTop := 0
	if warmer {
		warmTop = cfg.WarmTop
	}
	procs, stop, err := bench.StartServes(ctx, cfg.Serves, cfg.Binary, srv.DSN, srv.Redis.URL(), ns,
		"--l1-size", "0", "--audit-rate", "0", "--warm-top", strconv.Itoa(warmTop),
		"--source-foreground-rate", strconv.FormatFloat(cfg.ForegroundRate, 'f', -1, 64),
		"--source-background-rate", strconv.FormatFloat(cfg.BackgroundRate, 'f', -1, 64))
	if err != nil {
		return a, fmt.Errorf("bench warm: %w", err)
	}
	defer stop()

	var hits, total, unavail atomic.Int64
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients}}
	if cfg.Prime {
		t0 := time.Now()
		if err := prime(ctx, cfg, client, srv, ns, key); err != nil {
			return a, err
		}
		fmt.Fprintf(progress, "  primed all %d items in %s\n", cfg.Items, time.Since(t0).Round(100*time.Millisecond))
	}
	var load sync.WaitGroup
	defer load.Wait()
	defer cancel()
	for c := range cfg.Clients {
		load.Add(1)
		go func() {
			defer load.Done()
			r := mrand.New(mrand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			z := mrand.NewZipf(r, cfg.Zipf, 1, uint64(cfg.Items-1))
			base := procs[c%len(procs)].API
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/catalog/items/i"+strconv.FormatUint(z.Uint64(), 10), nil)
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				total.Add(1)
				switch {
				case resp.StatusCode == http.StatusServiceUnavailable:
					unavail.Add(1)
				case resp.StatusCode == http.StatusOK && strings.HasPrefix(resp.Header.Get("Cache-Status"), "tidemark; hit"):
					hits.Add(1)
				}
			}
		}()
	}

	type sample struct {
		at                   time.Time
		hits, total, unavail int64
		source               int64
	}
	var samples []sample
	take := func() error {
		n, err := bench.SourceReads(ctx, pool)
		if err != nil {
			return fmt.Errorf("bench warm: %w", err)
		}
		samples = append(samples, sample{at: time.Now(), hits: hits.Swap(0), total: total.Swap(0), unavail: unavail.Swap(0), source: n})
		return nil
	}
	tick := time.NewTicker(cfg.Window)
	defer tick.Stop()
	until := func(d time.Duration) error {
		end := time.Now().Add(d)
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			if err := take(); err != nil {
				return err
			}
		}
		return nil
	}
	if err := take(); err != nil {
		return a, err
	}
	if err := until(cfg.Warmup); err != nil {
		return a, err
	}
	var h, t int64
	for _, s := range samples[max(1, len(samples)-3):] {
		h, t = h+s.hits, t+s.total
	}
	if t == 0 || h == 0 {
		return a, fmt.Errorf("bench warm: %d hits of %d reads before the kill: the cache is not serving", h, t)
	}
	a.HitBefore = float64(h) / float64(t)
	var ub int64
	for _, s := range samples[max(1, len(samples)-3):] {
		ub += s.unavail
	}
	a.Before503 = float64(ub) / float64(t)
	fmt.Fprintf(progress, "  hit ratio before the kill %.1f %%; killing redis-server\n", 100*a.HitBefore)
	killAt := len(samples) - 1
	srv.Redis.Kill()
	killed := time.Now()
	if err := srv.Redis.Start(); err != nil {
		return a, fmt.Errorf("bench warm: restart redis-server: %w", err)
	}
	if err := until(cfg.Observe); err != nil {
		return a, err
	}
	var u1, t1, u2, t2, u3, t3, all int64
	half := killAt + 1 + (len(samples)-killAt-1)/2
	for i := killAt + 1; i < len(samples); i++ {
		s, prev := samples[i], samples[i-1]
		rate := float64(s.source-prev.source) / s.at.Sub(prev.at).Seconds()
		a.Windows = append(a.Windows, Window{At: s.at.Sub(killed), Hits: s.hits, Total: s.total, Unavail: s.unavail, SourcePerSec: rate})
		a.PeakSource = max(a.PeakSource, rate)
		all += s.total
		if !a.Reached && s.total > 0 && float64(s.hits)/float64(s.total) >= 0.9*a.HitBefore {
			a.Reached, a.TimeTo90 = true, s.at.Sub(killed)
		}
		if i >= half {
			u3, t3 = u3+s.unavail, t3+s.total
		}
		if a.Reached {
			u2, t2 = u2+s.unavail, t2+s.total
		} else {
			u1, t1 = u1+s.unavail, t1+s.total
		}
	}
	last := samples[len(samples)-1]
	a.MeanSource = float64(last.source-samples[killAt].source) / last.at.Sub(samples[killAt].at).Seconds()
	a.ReqRate = float64(all) / last.at.Sub(samples[killAt].at).Seconds()
	if t1 > 0 {
		a.Unavail = float64(u1) / float64(t1)
	}
	if t2 > 0 {
		a.After503 = float64(u2) / float64(t2)
	}
	if t3 > 0 {
		a.Late503 = float64(u3) / float64(t3)
	}
	for _, p := range procs {
		if v, err := p.Counter("tidemark_warm_keys_total", `result="filled"`); err == nil {
			a.WarmedKeys += v
		}
		if v, err := p.Counter("tidemark_warm_backoffs_total", ""); err == nil {
			a.WarmBackoff += v
		}
	}
	return a, nil
}

// prime reads every item once, so the cache holds the whole catalog: the
// steady state of a long-running cache before a loss. It reads through a
// serve process of its own with a source budget that does not hold it back
// (the arm's budget would make priming take Items/ForegroundRate seconds),
// stopped before the load starts.
func prime(ctx context.Context, cfg Config, client *http.Client, srv *bench.Stack, ns, key string) error {
	p, err := bench.StartServe(ctx, cfg.Binary, srv.DSN, srv.Redis.URL(), ns, "--l1-size", "0", "--audit-rate", "0", "--warm-top", "0",
		"--source-foreground-rate", "1000000", "--fill-rate", "0")
	if err != nil {
		return fmt.Errorf("bench warm: priming: %w", err)
	}
	defer p.Stop()
	procs := []*bench.Serve{p}
	next := make(chan int)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for c := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for try := 0; ctx.Err() == nil; try++ {
					req, _ := http.NewRequestWithContext(ctx, "GET", procs[c%len(procs)].API+"/v1/catalog/items/i"+strconv.Itoa(i), nil)
					req.Header.Set("Authorization", "Bearer "+key)
					resp, err := client.Do(req)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							break
						}
					}
					if try == 50 {
						failed.Add(1)
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	for i := range cfg.Items {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("bench warm: priming: %d items not answered 200 after 50 tries", n)
	}
	return nil
}

// WriteTable writes the report: the arms side by side and the hit ratio per
// window after the kill.
func (r Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	cfg := r.Config
	fmt.Fprintf(&b, "%s\n\n", r.Setup)
	fmt.Fprintln(&b, "| warmer | hit ratio before kill | time to 90 % of it | source reads/s after the kill: peak (mean) vs budget | GETs/s | 503s before the kill | until 90 % | after 90 % | second half of the observation | keys warmed | back-offs |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, a := range r.Arms {
		t := "not within " + cfg.Observe.String()
		if a.Reached {
			t = a.TimeTo90.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %.1f %% | %s | %.0f (%.0f) vs %.0f | %.0f | %.2f %% | %.2f %% | %.2f %% | %.2f %% | %.0f | %.0f |\n", onOff(a.Warmer), 100*a.HitBefore, t,
			a.PeakSource, a.MeanSource, r.Budget, a.ReqRate, 100*a.Before503, 100*a.Unavail, 100*a.After503, 100*a.Late503, a.WarmedKeys, a.WarmBackoff)
	}
	fmt.Fprintln(&b, "\nHit ratio per window after the kill (off / on):")
	fmt.Fprintln(&b)
	if len(r.Arms) == 2 {
		fmt.Fprintln(&b, "| since kill | hit ratio off | hit ratio on | source reads/s off | on |")
		fmt.Fprintln(&b, "|---|---|---|---|---|")
		for i := 0; i < len(r.Arms[0].Windows) && i < len(r.Arms[1].Windows); i++ {
			o, n := r.Arms[0].Windows[i], r.Arms[1].Windows[i]
			fmt.Fprintf(&b, "| %s | %.1f %% | %.1f %% | %.0f | %.0f |\n", n.At.Round(100*time.Millisecond), ratio(o.Hits, o.Total), ratio(n.Hits, n.Total), o.SourcePerSec, n.SourcePerSec)
		}
	}
	_, err := io.WriteString(w, b.String()+"\n")
	return err
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
