// Package hotkey is `tidemark-lab bench hotkey`: one key read at the highest rate
// the box sustains with the API's L1 off, on a Redis Cluster, with hot-key
// replicas off and then on (N copies), alternating in rounds. Each round
// first finds the ceiling: closed-loop readers with replicas off (every read
// a LOOKUP of the one master that owns the key). Both modes then offer the
// same rate, Load x that ceiling, so their p99 compare at equal load. It
// reports the per-master command rate (INFO commandstats of every master,
// Lua's inner calls included) as max/avg and the read latency of both modes.
package hotkeybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/replica"
)

// Config configures Run (`tidemark-lab bench hotkey`).
type Config struct {
	RedisURL  string        // --redis: Cluster seeds; "" starts a private cluster of Masters masters
	Masters   int           // --masters: size of the private cluster
	Replicas  int           // --replicas: copies of the key with replicas on
	Workers   int           // --workers: concurrent readers (closed loop: each sends its next read when the last returns)
	Processes int           // --processes: serve processes the readers are spread over (each holds its own manifests)
	Duration  time.Duration // --duration: measured time of one mode in one round
	Load      float64       // --load: offered rate as a share of the round's closed-loop ceiling
	Rounds    int           // --rounds: off/on pairs; the table shows medians
	// The from-cold phase (cold.go): rounds (0: none), the serve
	// processes' --hot-threshold and the offered rate as a multiple of it;
	// Binary is the tidemark executable that runs serve.
	ColdRounds    int
	ColdThreshold float64
	ColdFactor    float64
	Binary        string
}

// DefaultConfig is 3 masters, N = 3, 32 readers over 4 processes, three
// rounds of 4 s per mode; then three items from cold at 10x a threshold of
// 200 reads/s.
func DefaultConfig() Config {
	return Config{Masters: 3, Replicas: 3, Workers: 32, Processes: 4, Duration: 4 * time.Second, Load: 0.9, Rounds: 3,
		ColdRounds: 3, ColdThreshold: 200, ColdFactor: 10}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	for _, f := range []struct {
		field string
		n     int
	}{{"Masters", c.Masters}, {"Replicas", c.Replicas}, {"Workers", c.Workers}, {"Processes", c.Processes}, {"Rounds", c.Rounds}} {
		if f.n <= 0 {
			p.Add(f.field, "must be positive (got %d)", f.n)
		}
	}
	if c.Duration < 500*time.Millisecond {
		p.Add("Duration", "must be at least 500ms (got %s)", c.Duration)
	}
	if !(c.Load > 0 && c.Load <= 1) {
		p.Add("Load", "must be in (0, 1] (got %v)", c.Load)
	}
	if c.ColdRounds < 0 {
		p.Add("ColdRounds", "must be 0 (no from-cold phase) or positive (got %d)", c.ColdRounds)
	}
	if c.ColdRounds > 0 {
		if !(c.ColdThreshold > 0) {
			p.Add("ColdThreshold", "must be positive (got %v)", c.ColdThreshold)
		}
		if !(c.ColdFactor >= 1) {
			p.Add("ColdFactor", "must be at least 1 (got %v)", c.ColdFactor)
		}
		if c.Binary == "" {
			p.Add("Binary", "the tidemark executable is unknown")
		}
	}
	if c.Processes > c.Workers {
		p.Add("Processes", "must not exceed the number of readers (got %d processes for %d readers)", c.Processes, c.Workers)
	}
	return p.Err()
}

const benchNamespace = "tidemark-bench"

// mode is one measurement: every master's command rate and the latencies.
type mode struct {
	reads      int
	perMaster  map[string]float64 // commands/s
	lat        bench.Latency
	replicaPct float64 // share of reads answered by a copy
}

func (m mode) rate(d time.Duration) float64 { return float64(m.reads) / d.Seconds() }

// spread is max/avg of the per-master command rates: 1.0 is even.
func (m mode) spread() float64 {
	var sum, hi float64
	for _, r := range m.perMaster {
		sum += r
		hi = max(hi, r)
	}
	if sum == 0 {
		return 0
	}
	return hi / (sum / float64(len(m.perMaster)))
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Result is what Run measured: the rounds of each mode, and the from-cold
// rounds when ColdRounds > 0.
type Result struct {
	Config        Config // what was run
	Server        string // the cluster's URL, password redacted
	ceil, off, on []mode
	cold          []coldRound
}

// Run starts (or connects to) the cluster and runs the rounds.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	res, log := Result{Config: cfg}, deps.OrDefaults().Log
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	url := cfg.RedisURL
	if url == "" {
		stop, u, err := startCluster(ctx, cfg.Masters)
		if err != nil {
			return res, fmt.Errorf("bench hotkey: %w", err)
		}
		defer stop()
		url = u
	}
	rdb, err := cache.ParseRedisURL(url)
	if err != nil {
		return res, fmt.Errorf("bench hotkey: %w", err)
	}
	defer rdb.Close()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return res, errors.New("bench hotkey: needs a Redis Cluster (comma-separated seeds): the point is the spread over masters")
	}
	ccfg := cache.DefaultConfig()
	ccfg.Namespace = benchNamespace
	// A soft deadline far enough that the key stays a hit within a mode;
	// copies are renewed by the builder as in production.
	ccfg.SoftMin, ccfg.SoftMax = 20*time.Second, 20*time.Second
	c, err := cache.New(ccfg, cache.Deps{Redis: rdb, Log: log, Registerer: nil})
	if err != nil {
		return res, err
	}
	if err := c.LoadScripts(ctx); err != nil {
		return res, err
	}
	rcfg := replica.DefaultConfig()
	rcfg.Namespace, rcfg.Threshold, rcfg.Replicas = benchNamespace, 1, cfg.Replicas
	b, err := replica.New(rcfg, replica.Deps{Cache: c, Hot: func(context.Context, int) ([]replica.HotKey, error) { return nil, nil }})
	if err != nil {
		return res, err
	}
	tenant := "bench-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ceil, off, on := make([]mode, cfg.Rounds), make([]mode, cfg.Rounds), make([]mode, cfg.Rounds)
	for i := range cfg.Rounds {
		item := "hot-" + strconv.Itoa(i)
		if err := fill(ctx, c, tenant, item); err != nil {
			return res, err
		}
		if ceil[i], err = measure(ctx, cc, c, nil, cfg, tenant, item, 0); err != nil {
			return res, err
		}
		rate := cfg.Load * ceil[i].rate(cfg.Duration)
		if off[i], err = measure(ctx, cc, c, nil, cfg, tenant, item, rate); err != nil {
			return res, err
		}
		if on[i], err = measure(ctx, cc, c, b, cfg, tenant, item, rate); err != nil {
			return res, err
		}
	}
	res.Server, res.ceil, res.off, res.on = bench.RedactURL(url), ceil, off, on
	if cfg.ColdRounds > 0 {
		if res.cold, err = runCold(ctx, cfg, url, cc); err != nil {
			return res, fmt.Errorf("bench hotkey: from cold: %w", err)
		}
	}
	return res, nil
}

// fill installs the key through a lease, as a reader that missed would.
func fill(ctx context.Context, c *cache.Client, tenant, item string) error {
	r, err := c.Lookup(ctx, tenant, item, 0)
	if err != nil {
		return err
	}
	if r.Token.IsZero() {
		return fmt.Errorf("bench hotkey: lookup of a new key = %s, want a lease", r.Status)
	}
	return c.Fill(ctx, tenant, item, r.Token, 1, []byte(`{"display":"the hottest item of the catalog"}`), time.Now())
}

// measure runs cfg.Workers readers for cfg.Duration, closed-loop with rate 0,
// else each paced at rate/Workers (a late read is sent at once, never in a
// burst to catch up). With b nil
// every read is a LOOKUP of the primary (replicas off); otherwise b keeps a
// set of cfg.Replicas copies published and each read goes through the
// reader of its process, as the API's GET does with L1 off.
func measure(ctx context.Context, cc *redis.ClusterClient, c *cache.Client, b *replica.Builder, cfg Config,
	tenant, item string, rate float64) (mode, error) {
	readers := make([]*replica.Reader, cfg.Processes)
	for i := range readers {
		r, err := replica.NewReader(c, replica.MaxManifestTTL, nil, nil)
		if err != nil {
			return mode{}, err
		}
		readers[i] = r
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var bwg sync.WaitGroup
	if b != nil {
		if ok, err := b.Ensure(ctx, tenant, item, cfg.Replicas); !ok || err != nil {
			return mode{}, fmt.Errorf("bench hotkey: first replica set: published %v, %w", ok, err)
		}
		bwg.Add(1)
		go func() { // the builder's renewals, as serve runs them
			defer bwg.Done()
			lifecycle.Every(mctx, replica.DefaultConfig().Interval, func() { _, _ = b.Ensure(mctx, tenant, item, cfg.Replicas) }) // a failed renewal is retried next tick, as serve does
		}()
	}
	before, err := commandCounts(ctx, cc)
	if err != nil {
		return mode{}, err
	}
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	var (
		mu       sync.Mutex
		samples  []time.Duration
		copies   int
		firstErr error
		wg       sync.WaitGroup
	)
	for wid := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd := readers[wid%cfg.Processes]
			var local []time.Duration
			n := 0
			var every time.Duration
			if rate > 0 {
				every = time.Duration(float64(cfg.Workers) / rate * float64(time.Second))
			}
			next := time.Now().Add(time.Duration(wid) * every / time.Duration(cfg.Workers))
			for time.Now().Before(deadline) {
				if every > 0 {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					if next = next.Add(every); next.Before(time.Now()) {
						next = time.Now()
					}
				}
				t0 := time.Now()
				served := false
				if b != nil {
					_, served = rd.Read(ctx, tenant, item, 0, uint64(wid))
				}
				if !served {
					sent := time.Now()
					lr, err := c.Lookup(ctx, tenant, item, 0)
					if err != nil || lr.Status != cache.StatusHit {
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("bench hotkey: lookup = %s, %v; want a hit", lr.Status, err)
						}
						mu.Unlock()
						return
					}
					if b != nil {
						rd.Offer(tenant, item, lr.Replicas, sent)
					}
				} else {
					n++
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			samples = append(samples, local...)
			copies += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()
	bwg.Wait()
	if firstErr != nil {
		return mode{}, firstErr
	}
	after, err := commandCounts(ctx, cc)
	if err != nil {
		return mode{}, err
	}
	m := mode{reads: len(samples), perMaster: map[string]float64{}}
	for addr, n := range after {
		m.perMaster[addr] = float64(n-before[addr]) / elapsed.Seconds()
	}
	if len(samples) > 0 {
		m.replicaPct = 100 * float64(copies) / float64(len(samples))
	}
	m.lat = bench.Summarize(samples)
	return m, nil
}

// commandCounts sums the calls of every command in INFO commandstats, per
// master (the two INFO calls of a measurement are in both modes alike).
func commandCounts(ctx context.Context, cc *redis.ClusterClient) (map[string]int64, error) {
	var mu sync.Mutex
	out := map[string]int64{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "commandstats").Result()
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		var total int64
		for _, line := range strings.Split(info, "\n") {
			_, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
			if !ok {
				continue
			}
			calls, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(calls, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: commandstats line %q", node.Options().Addr, line)
			}
			total += n
		}
		mu.Lock()
		out[node.Options().Addr] = total
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench hotkey: INFO commandstats: %w", err)
	}
	return out, nil
}

func startCluster(ctx context.Context, n int) (stop func(), url string, err error) {
	var nodes []*localserver.Redis
	var dirs []string
	stop = func() {
		for _, r := range nodes {
			r.Remove()
		}
		for _, d := range dirs {
			os.RemoveAll(d)
		}
	}
	var addrs []string
	for range n {
		dir, err := os.MkdirTemp("", "tidemark-bench-redis-")
		if err != nil {
			stop()
			return nil, "", err
		}
		dirs = append(dirs, dir)
		r, err := localserver.NewRedis(localserver.RedisConfig{Dir: dir, Cluster: true})
		if err != nil {
			stop()
			return nil, "", fmt.Errorf("start redis-server: %w", err)
		}
		nodes = append(nodes, r)
		addrs = append(addrs, r.Addr)
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := localserver.FormCluster(fctx, nodes); err != nil {
		stop()
		return nil, "", err
	}
	return stop, "redis://" + strings.Join(addrs, ","), nil
}

func medianOf(ms []mode, f func(mode) float64) float64 {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = f(m)
	}
	return bench.Median(xs)
}

// WriteTable writes the modes' table, the from-cold rounds and the goals.
func (res Result) WriteTable(out io.Writer) error {
	w, cfg, url, ceil, off, on := &bench.ErrWriter{W: out}, res.Config, res.Server, res.ceil, res.off, res.on
	if len(on) == 0 {
		return nil
	}
	d := cfg.Duration
	p99 := func(m mode) float64 { return float64(m.lat.P99) }
	t := bench.Table{Header: []string{"mode", "reads/s", "p50", "p99", "per-master commands/s (median round)", "max/avg", "from copies"}}
	for _, row := range []struct {
		name  string
		modes []mode
	}{{"ceiling: replicas off, closed loop", ceil}, {fmt.Sprintf("replicas off at %.0f%% of the ceiling", 100*cfg.Load), off},
		{fmt.Sprintf("replicas N=%d at %.0f%% of the ceiling", cfg.Replicas, 100*cfg.Load), on}} {
		ms := row.modes
		t.Add(row.name, fmt.Sprintf("%.0f", medianOf(ms, func(m mode) float64 { return m.rate(d) })),
			bench.Ms(time.Duration(medianOf(ms, func(m mode) float64 { return float64(m.lat.P50) }))),
			bench.Ms(time.Duration(medianOf(ms, p99))),
			perMaster(medianMode(ms)), fmt.Sprintf("%.2f", medianOf(ms, mode.spread)),
			fmt.Sprintf("%.0f%%", medianOf(ms, func(m mode) float64 { return m.replicaPct })))
	}
	fmt.Fprintf(w, "## tidemark-lab bench hotkey\n\nOne key, %d readers over %d processes, L1 off, on %s; %d rounds of %s per mode (medians).\n\n",
		cfg.Workers, cfg.Processes, url, cfg.Rounds, d)
	t.WriteTo(w)
	spreadOn := medianOf(on, mode.spread)
	p99Ratio := medianOf(on, p99) / medianOf(off, p99)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	fmt.Fprintf(w, "\nGoal: load within 1.3x of even across masters with replicas: max/avg %.2f (%s); p99 no worse: on/off %.2f (%s).\n",
		spreadOn, verdict(spreadOn <= 1.3), p99Ratio, verdict(p99Ratio <= 1.0))
	if cfg.ColdRounds > 0 {
		reportCold(w, cfg, res.cold)
	}
	return w.Err
}

// medianMode is the round whose max/avg is the median, for the
// distribution column.
func medianMode(ms []mode) mode {
	s := append([]mode(nil), ms...)
	sort.Slice(s, func(i, j int) bool { return s[i].spread() < s[j].spread() })
	return s[len(s)/2]
}

func perMaster(m mode) string {
	addrs := make([]string, 0, len(m.perMaster))
	for a := range m.perMaster {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = fmt.Sprintf("%.0f", m.perMaster[a])
	}
	return strings.Join(parts, " / ")
}

// Chart draws each mode's per-master command rate.
func Chart(res Result) svgchart.BarChart {
	cfg, off, on := res.Config, res.off, res.on
	mo, mn := medianMode(off), medianMode(on)
	addrs := make([]string, 0, len(mo.perMaster))
	for a := range mo.perMaster {
		addrs = append(addrs, a)
	}
	sort.Strings(addrs)
	var groups []svgchart.BarGroup
	for i, a := range addrs {
		groups = append(groups, svgchart.BarGroup{Label: fmt.Sprintf("master %d", i+1), Values: []float64{mo.perMaster[a], mn.perMaster[a]}})
	}
	return svgchart.BarChart{
		Title:  fmt.Sprintf("tidemark-lab bench hotkey: commands/s per master, one key, L1 off (max/avg %.2f off, %.2f with N=%d)", mo.spread(), mn.spread(), cfg.Replicas),
		YLabel: "commands/s",
		Width:  900,
		Series: []string{"replicas off", fmt.Sprintf("replicas N=%d", cfg.Replicas)},
		Groups: groups,
		YTick:  bench.RateTick,
	}
}
