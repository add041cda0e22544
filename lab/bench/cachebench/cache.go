// Package cachebench is `tidemark-lab bench cache`: batched INVALIDATE throughput and
// LOOKUP hit latency of the cache-tier client, each round measured beside
// redis-benchmark ceilings on the same server.
package cachebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
)

// Config configures Run (`tidemark-lab bench cache`).
type Config struct {
	RedisURL      string // --redis; "" starts a private redis-server from PATH
	Keys          int    // distinct keys invalidated per round
	Batch         int    // invalidations per InvalidateBatch call
	Workers       int    // concurrent InvalidateBatch callers (an applier runs one per partition)
	Lookups       int    // sequential hit lookups timed
	Clients       int    // redis-benchmark -c for the pipelined ceilings
	Pipeline      int    // redis-benchmark -P
	BenchmarkPath string // redis-benchmark binary
	Rounds        int    // figures are medians over this many rounds
}

// DefaultConfig is 200k keys in batches of 500.
func DefaultConfig() Config {
	return Config{Keys: 200_000, Batch: 500, Workers: 4, Lookups: 20_000, Clients: 50, Pipeline: 100,
		BenchmarkPath: "redis-benchmark", Rounds: 5}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	for _, f := range []struct {
		field string
		n     int
	}{{"Keys", c.Keys}, {"Batch", c.Batch}, {"Workers", c.Workers}, {"Lookups", c.Lookups}, {"Clients", c.Clients}, {"Pipeline", c.Pipeline}, {"Rounds", c.Rounds}} {
		if f.n <= 0 {
			p.Add(f.field, "must be positive (got %d)", f.n)
		}
	}
	if c.BenchmarkPath == "" {
		p.Add("BenchmarkPath", "must name the redis-benchmark binary")
	}
	return p.Err()
}

// benchNamespace keeps benchmark keys apart from real data; they expire by
// themselves (FloorTTL, MaxAge).
const benchNamespace = "tidemark-bench"

// trivialLua is the ceiling's "equivalent trivial script": one hash write
// per key, the least an invalidation can do.
const trivialLua = "return redis.call('HSET', KEYS[1], 'floor', ARGV[1])"

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Result is what Run measured: every round's figures beside its ceilings.
type Result struct {
	Config   Config // what was run
	Server   string // the server's URL, password redacted
	Version  string // redis-server's
	Commands []string
	rounds   []benchRound
}

// Run measures batched InvalidateBatch throughput and single Lookup hit
// latency and runs redis-benchmark against the same server for the
// ceilings.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	res, log := Result{Config: cfg}, deps.OrDefaults().Log
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	if _, err := exec.LookPath(cfg.BenchmarkPath); err != nil {
		return res, fmt.Errorf("bench cache: %s not found (it is installed with redis-server): %w", cfg.BenchmarkPath, err)
	}
	url, stop, err := bench.PrivateRedis(cfg.RedisURL, "bench cache")
	if err != nil {
		return res, err
	}
	defer stop()
	rdb, err := cache.ParseRedisURL(url)
	if err != nil {
		return res, fmt.Errorf("bench cache: %w", err)
	}
	defer rdb.Close()
	ccfg := cache.DefaultConfig()
	ccfg.Namespace = benchNamespace
	ccfg.SoftMin, ccfg.SoftMax = 25*time.Second, 25*time.Second // keep the timed lookups hits
	c, err := cache.New(ccfg, cache.Deps{Redis: rdb, Log: log, Registerer: nil})
	if err != nil {
		return res, err
	}
	if err := c.LoadScripts(ctx); err != nil {
		return res, err
	}
	rb, err := newRedisBench(ctx, cfg, rdb)
	if err != nil {
		return res, err
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 36)

	trivialSHA, err := loadEverywhere(ctx, rdb, trivialLua)
	if err != nil {
		return res, err
	}
	// The box may be shared: each round measures ours right beside its
	// ceilings, and the report gives medians over rounds (figures and
	// per-round ratios), so a burst of foreign load skews neither side.
	rounds := make([]benchRound, cfg.Rounds)
	for i := range rounds {
		if err := runRound(ctx, c, cfg, rb, trivialSHA, run+"-"+strconv.Itoa(i), &rounds[i]); err != nil {
			return res, err
		}
	}
	res.Server, res.Version, res.Commands, res.rounds = bench.RedactURL(url), rb.version, rb.Commands, rounds
	return res, nil
}

// benchRound is one round's figures: pipelined throughputs in ops/s,
// latencies from single-client runs.
type benchRound struct {
	set, trivial, script bench.RedisResult // redis-benchmark ceilings
	inv1, invN, invAgain float64           // InvalidateBatch keys/s
	latEval, latGet      bench.RedisResult // redis-benchmark -c 1
	lookup               lookupStats
	// redis-server CPU per operation (cpuKnown false for a Cluster):
	// unlike throughput it does not depend on who else uses the CPUs.
	cpuKnown            bool
	cpuTrivial, cpuInvN time.Duration
}

func runRound(ctx context.Context, c *cache.Client, cfg Config, rb *redisBench, trivialSHA, tag string, r *benchRound) error {
	randKey := "{" + tag + "/__rand_int__}"
	// Like the InvalidateBatch runs, the ceilings write (almost) only new
	// keys: __rand_int__ drawn from a keyspace far larger than -n.
	const keyspace = "1000000000"
	var err error
	cpu0 := rb.serverCPU(ctx)
	if r.trivial, err = rb.run(ctx, true, "-r", keyspace, "EVALSHA", trivialSHA, "1", "bench:"+randKey, "7"); err != nil {
		return err
	}
	cpu1 := rb.serverCPU(ctx)
	if r.invN, err = benchInvalidate(ctx, c, cfg, tag+"-n", cfg.Workers); err != nil {
		return err
	}
	cpu2 := rb.serverCPU(ctx)
	if cpu0 >= 0 && cpu1 >= 0 && cpu2 >= 0 {
		r.cpuKnown = true
		r.cpuTrivial, r.cpuInvN = (cpu1-cpu0)/time.Duration(cfg.Keys), (cpu2-cpu1)/time.Duration(cfg.Keys)
	}
	if r.set, err = rb.run(ctx, true, "-t", "set"); err != nil {
		return err
	}
	if r.invAgain, err = benchInvalidate(ctx, c, cfg, tag+"-n", cfg.Workers); err != nil { // same keys, newer version
		return err
	}
	if r.script, err = rb.run(ctx, true, "-r", keyspace, "EVALSHA", cache.InvalidateScriptSHA(), "1",
		benchNamespace+":v1:"+randKey, "7", strconv.FormatInt(cache.DefaultConfig().FloorTTL.Milliseconds(), 10)); err != nil {
		return err
	}
	if r.inv1, err = benchInvalidate(ctx, c, cfg, tag+"-1", 1); err != nil {
		return err
	}
	if r.latEval, err = rb.run(ctx, false, "EVALSHA", trivialSHA, "1", "bench:"+randKey, "7"); err != nil {
		return err
	}
	if r.lookup, err = benchLookup(ctx, c, cfg, tag); err != nil {
		return err
	}
	r.latGet, err = rb.run(ctx, false, "-t", "get")
	return err
}

// pair is one measurement of every round beside its ceiling of the same
// round.
type pair struct{ ours, ceiling []float64 }

func collect(rounds []benchRound, f func(r benchRound) (float64, float64)) pair {
	var p pair
	for _, r := range rounds {
		a, b := f(r)
		p.ours, p.ceiling = append(p.ours, a), append(p.ceiling, b)
	}
	return p
}

// ratios are the per-round ratios ours / ceiling.
func (p pair) ratios() []float64 {
	var out []float64
	for i := range p.ours {
		if p.ceiling[i] > 0 {
			out = append(out, p.ours[i]/p.ceiling[i])
		}
	}
	return out
}

// throughput is one throughput row of the report and one group of its
// chart: InvalidateBatch keys/s beside a pipelined redis-benchmark ceiling.
type throughput struct {
	what, ceilingName string // the table's wording
	label             string // the chart's, shorter
	pair
}

// throughputs are the report's throughput rows; the first is the goal's.
func throughputs(cfg Config, rounds []benchRound) []throughput {
	pipe := fmt.Sprintf("-P %d -c %d", cfg.Pipeline, cfg.Clients)
	trivial := "pipelined EVALSHA, trivial HSET script, " + pipe
	newKeys := fmt.Sprintf("InvalidateBatch, %d workers, new keys", cfg.Workers)
	return []throughput{
		{newKeys, trivial, fmt.Sprintf("new keys, %d workers\nceiling: HSET script", cfg.Workers),
			collect(rounds, func(r benchRound) (float64, float64) { return r.invN, r.trivial.RPS })},
		{fmt.Sprintf("InvalidateBatch, %d workers, newer version of the same keys", cfg.Workers), trivial,
			fmt.Sprintf("newer versions, %d workers\nceiling: HSET script", cfg.Workers),
			collect(rounds, func(r benchRound) (float64, float64) { return r.invAgain, r.trivial.RPS })},
		{"InvalidateBatch, 1 worker, new keys", trivial, "new keys, 1 worker\nceiling: HSET script",
			collect(rounds, func(r benchRound) (float64, float64) { return r.inv1, r.trivial.RPS })},
		{newKeys, "pipelined SET, " + pipe, fmt.Sprintf("new keys, %d workers\nceiling: SET", cfg.Workers),
			collect(rounds, func(r benchRound) (float64, float64) { return r.invN, r.set.RPS })},
		{newKeys, "pipelined EVALSHA of tidemark's INVALIDATE script, " + pipe,
			fmt.Sprintf("new keys, %d workers\nceiling: INVALIDATE script", cfg.Workers),
			collect(rounds, func(r benchRound) (float64, float64) { return r.invN, r.script.RPS })},
	}
}

// chart is the throughput chart: each row of throughputs as a group of
// medians, noted with the median per-round ratio (as the table).
func Chart(res Result) svgchart.BarChart {
	cfg, rounds := res.Config, res.rounds
	var groups []svgchart.BarGroup
	for _, t := range throughputs(cfg, rounds) {
		groups = append(groups, svgchart.BarGroup{Label: t.label, Values: []float64{bench.Median(t.ours), bench.Median(t.ceiling)},
			Note: fmt.Sprintf("%.2fx", bench.Median(t.ratios()))})
	}
	return svgchart.BarChart{
		Title: fmt.Sprintf("tidemark-lab bench cache: InvalidateBatch throughput against redis-benchmark ceilings\n"+
			"%d keys per round in batches of %d; bars: medians of %d rounds; ratio: median of the rounds' ratios",
			cfg.Keys, cfg.Batch, len(rounds)),
		YLabel: "keys/s (tidemark), requests/s (ceiling)",
		Width:  900,
		Series: []string{"tidemark InvalidateBatch", fmt.Sprintf("redis-benchmark -P %d -c %d, same round (ceiling)", cfg.Pipeline, cfg.Clients)},
		Groups: groups,
		YTick:  bench.RateTick,
	}
}

// WriteTable writes the Markdown table with the ratios and the goal.
func (res Result) WriteTable(out io.Writer) error {
	w, cfg, rounds := &bench.ErrWriter{W: out}, res.Config, res.rounds
	if len(rounds) == 0 {
		return nil
	}
	fmt.Fprintf(w, "server: %s (redis-server %s); %d keys per round in batches of %d; %d rounds, medians shown\n\n",
		res.Server, res.Version, cfg.Keys, cfg.Batch, cfg.Rounds)
	fmt.Fprintln(w, "| measurement | tidemark | ceiling (redis-benchmark, same server, same round) | ratio |")
	fmt.Fprintln(w, "|---|---|---|---|")
	of := func(f func(r benchRound) (float64, float64)) pair { return collect(rounds, f) }
	lat := func(what, ceilingName string, p pair) {
		fmt.Fprintf(w, "| %s | %.0f µs | %s: %.0f µs | %.2fx |\n", what, bench.Median(p.ours), ceilingName, bench.Median(p.ceiling), bench.Median(p.ratios()))
	}
	thr := throughputs(cfg, rounds)
	for _, t := range thr {
		fmt.Fprintf(w, "| %s | %.0f keys/s | %s: %.0f/s | %.2fx |\n", t.what, bench.Median(t.ours), t.ceilingName, bench.Median(t.ceiling), bench.Median(t.ratios()))
	}
	headline := thr[0].pair
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	lat("Lookup hit latency p50", "EVALSHA trivial script, -c 1, p50",
		of(func(r benchRound) (float64, float64) { return us(r.lookup.p50), us(r.latEval.P50) }))
	lat("Lookup hit latency p99", "EVALSHA trivial script, -c 1, p99",
		of(func(r benchRound) (float64, float64) { return us(r.lookup.p99), us(r.latEval.P99) }))
	lat("Lookup hit latency p50", "GET, -c 1, p50",
		of(func(r benchRound) (float64, float64) { return us(r.lookup.p50), us(r.latGet.P50) }))
	lat("Lookup hit latency p99", "GET, -c 1, p99",
		of(func(r benchRound) (float64, float64) { return us(r.lookup.p99), us(r.latGet.P99) }))

	if rounds[0].cpuKnown {
		ns := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		p := of(func(r benchRound) (float64, float64) { return ns(r.cpuTrivial), ns(r.cpuInvN) })
		// Capacity ratio: how many invalidations the server can run per
		// trivial script, from CPU spent rather than wall-clock time.
		fmt.Fprintf(w, "| redis-server CPU per invalidation (INFO cpu, %d workers, new keys) | %.2f µs | trivial HSET script: %.2f µs | %.2fx capacity |\n",
			cfg.Workers, bench.Median(p.ceiling), bench.Median(p.ours), bench.Median(p.ratios()))
	}
	hits := 0.0
	for _, r := range rounds {
		hits += r.lookup.hitRate
	}
	rs := headline.ratios()
	verdict := "met"
	if bench.Median(rs) < 0.6 {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "\nGoal: batched invalidate >= 0.6x the pipelined EVALSHA ceiling: %s (median %.2fx; per round:", verdict, bench.Median(rs))
	for _, r := range rs {
		fmt.Fprintf(w, " %.2fx", r)
	}
	fmt.Fprintf(w, ").\nLookups: %d sequential per round over 1000 filled keys, %.1f%% hits.\n", cfg.Lookups, 100*hits/float64(len(rounds)))
	fmt.Fprintln(w, "\nredis-benchmark commands (first round):")
	for _, cmd := range res.Commands[:min(len(res.Commands), 5)] {
		fmt.Fprintf(w, "    %s\n", cmd)
	}
	return w.Err
}

// benchInvalidate invalidates cfg.Keys keys in batches of cfg.Batch from
// workers goroutines and returns keys per second.
func benchInvalidate(ctx context.Context, c *cache.Client, cfg Config, tenant string, workers int) (float64, error) {
	version := time.Now().UnixNano() // newer than any earlier round
	batches := make(chan []cache.Invalidation, workers)
	go func() {
		defer close(batches)
		for lo := 0; lo < cfg.Keys; lo += cfg.Batch {
			b := make([]cache.Invalidation, 0, cfg.Batch)
			for i := lo; i < min(lo+cfg.Batch, cfg.Keys); i++ {
				b = append(b, cache.Invalidation{Tenant: tenant, Item: "item" + strconv.Itoa(i), Version: version})
			}
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				out, err := c.InvalidateBatch(ctx, b)
				if err == nil {
					for _, o := range out {
						if o.Err != nil || o.Result != cache.InvalidateApplied {
							err = fmt.Errorf("unexpected outcome %+v", o)
							break
						}
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, fmt.Errorf("bench cache invalidate: %w", firstErr)
	}
	return float64(cfg.Keys) / time.Since(start).Seconds(), nil
}

type lookupStats struct {
	p50, p99 time.Duration
	hitRate  float64
}

// benchLookup fills 1000 keys, then times cfg.Lookups sequential lookups.
func benchLookup(ctx context.Context, c *cache.Client, cfg Config, tenant string) (lookupStats, error) {
	const hot = 1000
	for i := range hot {
		item := "hot" + strconv.Itoa(i)
		r, err := c.Lookup(ctx, tenant, item, 0)
		if err != nil {
			return lookupStats{}, err
		}
		if err := c.Fill(ctx, tenant, item, r.Token, 1, []byte(`{"name":"a benchmark item","price":1999}`), time.Now()); err != nil {
			return lookupStats{}, err
		}
	}
	lat := make([]time.Duration, 0, cfg.Lookups)
	hits := 0
	for range cfg.Lookups {
		item := "hot" + strconv.Itoa(rand.IntN(hot))
		start := time.Now()
		r, err := c.Lookup(ctx, tenant, item, 0)
		lat = append(lat, time.Since(start))
		if err != nil {
			return lookupStats{}, err
		}
		if r.Status == cache.StatusHit {
			hits++
		}
	}
	l := bench.Summarize(lat)
	return lookupStats{p50: l.P50, p99: l.P99, hitRate: float64(hits) / float64(len(lat))}, nil
}

// loadEverywhere loads a script on every master and returns its SHA1.
func loadEverywhere(ctx context.Context, rdb redis.UniversalClient, src string) (string, error) {
	s := redis.NewScript(src)
	err := forEachMaster(ctx, rdb, func(ctx context.Context, n *redis.Client) error { return s.Load(ctx, n).Err() })
	if err != nil {
		return "", fmt.Errorf("bench cache: load script: %w", err)
	}
	return s.Hash(), nil
}

// forEachMaster runs fn on every master rdb talks to.
func forEachMaster(ctx context.Context, rdb redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		return r.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, r)
	}
	return fmt.Errorf("unsupported redis client type %T", rdb)
}

// redisBench runs redis-benchmark against the server the client talks to.
type redisBench struct {
	*bench.RedisBenchmark
	cfg     Config
	version string
	// standalone is the server whose CPU is measured; nil for a Cluster.
	standalone *redis.Client
}

// serverCPU is the redis-server's user+system CPU time so far, -1 if
// unknown (a Cluster: the work is spread over nodes). It comes from INFO cpu,
// which Redis takes from getrusage: microseconds, where /proc/<pid>/stat
// counts 10 ms clock ticks, too coarse for a smoke run whose invalidations
// cost the server a few ms in all (the row then vanished when a round
// rounded to zero ticks).
func (rb *redisBench) serverCPU(ctx context.Context) time.Duration {
	if rb.standalone == nil {
		return -1
	}
	info, err := rb.standalone.Info(ctx, "cpu").Result()
	if err != nil {
		return -1
	}
	var total time.Duration
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		secs, err := strconv.ParseFloat(bench.InfoField(info, f), 64)
		if err != nil {
			return -1
		}
		total += time.Duration(secs * float64(time.Second))
	}
	return total
}

func newRedisBench(ctx context.Context, cfg Config, rdb redis.UniversalClient) (*redisBench, error) {
	r, err := bench.RedisBenchmarkFor(cfg.BenchmarkPath, rdb)
	if err != nil {
		return nil, err
	}
	_, cluster := rdb.(*redis.ClusterClient)
	rb := &redisBench{RedisBenchmark: r, cfg: cfg}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("bench cache: %w", err)
	}
	rb.version = bench.InfoField(info, "redis_version")
	if c, ok := rdb.(*redis.Client); ok && !cluster {
		rb.standalone = c
	}
	return rb, nil
}

// run runs one redis-benchmark test: pipelined throughput (cfg.Clients
// clients, cfg.Pipeline deep) or single-client latency (cfg.Lookups requests).
func (rb *redisBench) run(ctx context.Context, pipelined bool, test ...string) (bench.RedisResult, error) {
	args := []string{"-n", strconv.Itoa(rb.cfg.Lookups), "-c", "1"}
	if pipelined {
		args = []string{"-n", strconv.Itoa(rb.cfg.Keys), "-c", strconv.Itoa(rb.cfg.Clients), "-P", strconv.Itoa(rb.cfg.Pipeline)}
	}
	return rb.Run(ctx, append(args, test...)...)
}
