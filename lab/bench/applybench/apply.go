// Package applybench is `tidemark-lab bench apply`: replay throughput of the applier
// into Redis against the pipelined EVALSHA ceiling redis-benchmark measures
// on the same server, and commit-to-apply latency at a steady rate.
package applybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/schema"
)

// Config configures Run (`tidemark-lab bench apply`).
type Config struct {
	Brokers    []string      // --kafka; empty starts an in-process kfake
	RedisURL   string        // --redis: a standalone Redis, also the EVALSHA ceiling's (redis-benchmark); "" starts a private redis-server
	Events     int           // --events replayed
	Keys       int           // --keys the events spread over
	Partitions int           // --partitions of the bench topics
	Rate       int           // --rate of the steady latency phase, events/s
	Duration   time.Duration // --duration of the steady latency phase
}

// DefaultConfig is the benchmark BENCHMARKS.md reports: a million
// events over 100,000 keys, then 2,000 events/s for 15 s.
func DefaultConfig() Config {
	return Config{Events: 1_000_000, Keys: 100_000, Partitions: 12, Rate: 2000, Duration: 15 * time.Second}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.RedisURL != "" {
		if _, err := redis.ParseURL(c.RedisURL); err != nil {
			p.Add("RedisURL", "must be a standalone Redis URL (redis://host:port/db): %v", err)
		}
	}
	if c.Events < 1 {
		p.Add("Events", "must be positive (got %d)", c.Events)
	}
	if c.Keys < 1 || c.Keys > c.Events {
		p.Add("Keys", "must be positive and at most the events (got %d keys, %d events)", c.Keys, c.Events)
	}
	if c.Partitions < 1 {
		p.Add("Partitions", "must be at least 1 (got %d)", c.Partitions)
	}
	if c.Rate < 1 {
		p.Add("Rate", "must be positive (got %d)", c.Rate)
	}
	if c.Duration < time.Second {
		p.Add("Duration", "must be at least 1s (got %s)", c.Duration)
	}
	return p.Err()
}

// Result is what the benchmark measured.
type Result struct {
	Config         Config // what was run
	Events         int64
	ReplayElapsed  time.Duration
	ReplayRate     float64 // events/s
	Replay         applier.Counts
	CeilingTrivial float64       // redis-benchmark -P 100 EVALSHA of `return 1`, requests/s
	CeilingKeyed   float64       // the same with one HSET on a random key of --keys, requests/s
	PingP99        time.Duration // redis-benchmark -c 1 PING p99 in the same run: the box's latency noise floor
	Ratio          float64       // ReplayRate / CeilingTrivial
	SteadyEvents   int
	SteadyRate     float64
	P50, P99, Max  time.Duration // commit-to-apply at the steady rate
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// runner runs the applier benchmarks against a cache tier.
type runner struct {
	cfg       Config
	redisAddr string // host:port of the server, for redis-benchmark
	cache     applier.Cache
	log       *slog.Logger
}

// Run measures replay throughput, the EVALSHA ceiling, and steady-state
// commit-to-apply latency on cfg.RedisURL or a private redis-server.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	deps = deps.OrDefaults()
	redisURL, stop, err := bench.PrivateRedis(cfg.RedisURL, "bench apply")
	if err != nil {
		return Result{}, err
	}
	defer stop()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return Result{}, fmt.Errorf("bench apply: %w", err)
	}
	opt.PoolSize, opt.ContextTimeoutEnabled = 64, true
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: deps.Log, Registerer: nil})
	if err != nil {
		return Result{}, err
	}
	b := &runner{cfg: cfg, redisAddr: opt.Addr, cache: cc, log: deps.Log.With("component", "bench")}
	return b.run(ctx)
}

func (b *runner) run(ctx context.Context) (Result, error) {
	res := Result{Config: b.cfg}
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	replayTopic, steadyTopic := "bench.replay."+suffix, "bench.steady."+suffix

	// Phase 1: commit-to-apply latency at a steady rate through the group
	// applier. It runs first, on its own broker, so the replay's million
	// records are not on the heap the garbage collector scans meanwhile.
	brokers, closeKafka, err := b.kafka(steadyTopic)
	if err != nil {
		return res, err
	}
	b.log.Info("steady phase", "rate", b.cfg.Rate, "duration", b.cfg.Duration)
	err = b.steady(ctx, brokers, steadyTopic, &res)
	closeKafka()
	if err != nil {
		return res, err
	}
	runtime.GC()

	// Phase 2: replay throughput.
	brokers, closeKafka, err = b.kafka(replayTopic)
	if err != nil {
		return res, err
	}
	defer closeKafka()
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(900<<10), kgo.MaxBufferedRecords(200_000), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return res, fmt.Errorf("bench apply: kafka client: %w", err)
	}
	defer prod.Close()
	since := time.Now().Add(-time.Second)
	b.log.Info("producing", "events", b.cfg.Events, "keys", b.cfg.Keys, "topic", replayTopic)
	if err := b.produceHistory(ctx, prod, replayTopic); err != nil {
		return res, err
	}
	rcfg := applier.DefaultReplayConfig()
	rcfg.Brokers, rcfg.Topic, rcfg.Since = brokers, replayTopic, since
	rp, err := applier.NewReplay(rcfg, applier.Deps{Cache: b.cache, Log: b.log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return res, err
	}
	b.log.Info("replaying")
	sum, err := rp.Run(ctx)
	if err != nil {
		return res, err
	}
	res.Events, res.ReplayElapsed, res.Replay = sum.Records, sum.Elapsed, sum.Counts
	res.ReplayRate = float64(sum.Records) / sum.Elapsed.Seconds()

	// Phase 3: the ceiling, measured now, on the same server.
	b.log.Info("measuring the pipelined EVALSHA ceiling with redis-benchmark")
	if res.CeilingTrivial, err = evalshaCeiling(ctx, b.redisAddr, "return 1", 0, 0); err != nil {
		return res, err
	}
	if res.CeilingKeyed, err = evalshaCeiling(ctx, b.redisAddr, "return redis.call('HSET', KEYS[1], 'floor', ARGV[1])", 1, b.cfg.Keys); err != nil {
		return res, err
	}
	res.Ratio = res.ReplayRate / res.CeilingTrivial
	if res.PingP99, err = pingP99(ctx, b.redisAddr); err != nil {
		return res, err
	}
	return res, nil
}

// kafka returns the configured brokers, or starts an in-process kfake with
// topic (closed by the returned func).
func (b *runner) kafka(topic string) ([]string, func(), error) {
	if len(b.cfg.Brokers) > 0 {
		return b.cfg.Brokers, func() {}, nil
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(int32(b.cfg.Partitions), topic),
		kfake.GroupMinSessionTimeout(time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("bench apply: start kfake: %w", err)
	}
	return kc.ListenAddrs(), kc.Close, nil
}

func (b *runner) produceHistory(ctx context.Context, prod *kgo.Client, topic string) error {
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	versions := make([]int64, b.cfg.Keys)
	commit := time.Now()
	for i := 0; i < b.cfg.Events; i++ {
		k := (i * 7919) % b.cfg.Keys // spread keys over the stream
		versions[k]++
		item := "item-" + strconv.Itoa(k)
		ev := &schema.Change{Tenant: "bench", Item: item, Version: versions[k], Op: schema.OpUpsert, LSN: schema.LSN(i + 1), CommitTime: commit, Xid: 1}
		wg.Add(1)
		prod.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(schema.Key("bench", item)), Value: schema.Encode(ev)}, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				firstErr = cmp(firstErr, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("bench apply: produce: %w", firstErr)
	}
	return nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// latencyCache records commit-to-apply per invalidation: the steady phase
// writes the commit time (unix nanos) as the version.
type latencyCache struct {
	applier.Cache
	mu   sync.Mutex
	lats []time.Duration
	on   bool
}

func (l *latencyCache) InvalidateBatch(ctx context.Context, batch []cache.Invalidation) ([]cache.InvalidateOutcome, error) {
	out, err := l.Cache.InvalidateBatch(ctx, batch)
	if err != nil {
		return out, err
	}
	now := time.Now()
	l.mu.Lock()
	if l.on {
		for _, inv := range batch {
			l.lats = append(l.lats, now.Sub(time.Unix(0, inv.Version)))
		}
	}
	l.mu.Unlock()
	return out, nil
}

func (b *runner) steady(ctx context.Context, brokers []string, topic string, res *Result) error {
	// Its own producer without linger: the latency measured is the
	// applier's (fetch, batch, apply), not a producer's batching delay.
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0))
	if err != nil {
		return fmt.Errorf("bench apply: kafka client: %w", err)
	}
	defer prod.Close()
	lc := &latencyCache{Cache: b.cache}
	cfg := applier.DefaultConfig()
	cfg.Brokers, cfg.Topic, cfg.Group = brokers, topic, topic
	a, err := applier.New(cfg, applier.Deps{Cache: lc, Log: b.log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Run(actx) }()
	send := func(i int) {
		now := time.Now()
		item := "steady-" + strconv.Itoa(i%10_000)
		ev := &schema.Change{Tenant: "bench", Item: item, Version: now.UnixNano(), Op: schema.OpUpsert, LSN: 1, CommitTime: now, Xid: 1}
		prod.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(schema.Key("bench", item)), Value: schema.Encode(ev)}, nil)
	}
	// Warm up until every partition is assigned and applying.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		send(i)
		time.Sleep(20 * time.Millisecond)
		if c := a.Counts(); c.Total() >= 50 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("bench apply: the steady-phase applier applied nothing within 30s")
		}
	}
	time.Sleep(200 * time.Millisecond)
	lc.mu.Lock()
	lc.on = true
	lc.mu.Unlock()
	// Send in 1 ms ticks so the stream is smooth, not bursty.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for time.Since(start) < b.cfg.Duration {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds() * float64(b.cfg.Rate))
		for ; sent < due; sent++ {
			send(sent)
		}
	}
	elapsed := time.Since(start)
	want := sent
	deadline = time.Now().Add(30 * time.Second)
	for {
		lc.mu.Lock()
		n := len(lc.lats)
		lc.mu.Unlock()
		if n >= want || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		return err
	}
	lc.mu.Lock()
	lats := slices.Clone(lc.lats)
	lc.mu.Unlock()
	if len(lats) == 0 {
		return errors.New("bench apply: no latency samples")
	}
	l := bench.Summarize(lats)
	res.SteadyEvents, res.SteadyRate = len(lats), float64(sent)/elapsed.Seconds()
	res.P50, res.P99, res.Max = l.P50, l.P99, l.Max
	return nil
}

// evalshaCeiling runs redis-benchmark -P 100 with EVALSHA of script and
// returns requests/s.
func evalshaCeiling(ctx context.Context, addr, script string, keys, keyspace int) (float64, error) {
	rb, err := bench.RedisBenchmarkAt("", addr)
	if err != nil {
		return 0, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	sha, err := rdb.ScriptLoad(ctx, script).Result()
	if err != nil {
		return 0, fmt.Errorf("bench apply: script load: %w", err)
	}
	args := []string{"-P", "100", "-c", "50", "-n", "1000000"}
	cmdArgs := []string{"EVALSHA", sha, strconv.Itoa(keys)}
	if keys > 0 {
		args = append(args, "-r", strconv.Itoa(keyspace))
		cmdArgs = append(cmdArgs, "bench:ceiling:{__rand_int__}", "1")
	}
	r, err := rb.Run(ctx, append(args, cmdArgs...)...)
	if err != nil {
		return 0, err
	}
	if keys > 0 {
		rdb.Eval(ctx, "for _, k in ipairs(redis.call('KEYS', 'bench:ceiling:*')) do redis.call('DEL', k) end", nil)
	}
	return r.RPS, nil
}

// pingP99 is the p99 of single PINGs, one client, no pipelining: what the
// machine's scheduling adds to any round trip at this moment.
func pingP99(ctx context.Context, addr string) (time.Duration, error) {
	rb, err := bench.RedisBenchmarkAt("", addr)
	if err != nil {
		return 0, err
	}
	r, err := rb.Run(ctx, "-c", "1", "-n", "20000", "-t", "ping_inline")
	if err != nil {
		return 0, err
	}
	return r.P99, nil
}

// WriteTable writes the Markdown table with the goals.
func (res Result) WriteTable(out io.Writer) error {
	w, cfg := &bench.ErrWriter{W: out}, res.Config
	fmt.Fprintf(w, "| measure | value | goal |\n|---|---|---|\n")
	fmt.Fprintf(w, "| replay: %d events over %d keys, %d partitions | %s, **%.0f events/s** (applied %d, duplicate %d, older %d) | >= 100,000/s |\n",
		res.Events, cfg.Keys, cfg.Partitions, res.ReplayElapsed.Round(time.Millisecond), res.ReplayRate, res.Replay.Applied, res.Replay.Duplicate, res.Replay.Older)
	fmt.Fprintf(w, "| ceiling: redis-benchmark -P 100 -c 50 EVALSHA `return 1` | %.0f req/s | |\n", res.CeilingTrivial)
	fmt.Fprintf(w, "| ceiling: the same, one HSET on a random key | %.0f req/s | |\n", res.CeilingKeyed)
	fmt.Fprintf(w, "| replay / trivial EVALSHA ceiling | **%.2f** | |\n", res.Ratio)
	fmt.Fprintf(w, "| noise floor: redis-benchmark -c 1 PING p99, same run | %s | |\n", bench.Ms(res.PingP99))
	fmt.Fprintf(w, "| commit-to-apply at %.0f events/s (%d samples) | p50 %s, **p99 %s**, max %s | p99 < 20 ms |\n",
		res.SteadyRate, res.SteadyEvents, bench.Ms(res.P50), bench.Ms(res.P99), bench.Ms(res.Max))
	return w.Err
}
