package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"tidemark/cache"
	"tidemark/internal/config"
	"tidemark/lab/bench"
	"tidemark/lab/bench/applybench"
	"tidemark/lab/localserver"
)

// benchApplyCmd wires flags into applybench.BenchConfig (lab/bench/applybench), provides the servers
// (a private redis-server and in-process kfake unless given) and prints the
// table.
type benchApplyCmd struct {
	Kafka      string        `field:"benchapply.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka brokers; empty starts an in-process kfake."`
	Redis      string        `name:"redis" env:"TIDEMARK_REDIS" help:"A standalone Redis (redis://host:port/db) to benchmark; empty starts a private redis-server. Its data is used: point it at a scratch server."`
	Events     int           `field:"benchapply.Events" name:"events" default:"${benchapply_Events}" help:"Events replayed."`
	Keys       int           `field:"benchapply.Keys" name:"keys" default:"${benchapply_Keys}" help:"Keys the replayed events spread over."`
	Partitions int           `field:"benchapply.Partitions" name:"partitions" default:"${benchapply_Partitions}" help:"Partitions of the bench topics."`
	Rate       int           `field:"benchapply.Rate" name:"rate" default:"${benchapply_Rate}" help:"Events/s of the steady latency phase."`
	Duration   time.Duration `field:"benchapply.Duration" name:"duration" default:"${benchapply_Duration}" help:"Length of the steady latency phase."`
	SVG        string        `name:"svg" default:"apply.svg" help:"Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchApplyCmd) config() applybench.BenchConfig {
	cfg := applybench.DefaultBenchConfig()
	cfg.Brokers = splitList(c.Kafka)
	cfg.Events, cfg.Keys, cfg.Partitions, cfg.Rate, cfg.Duration = c.Events, c.Keys, c.Partitions, c.Rate, c.Duration
	return cfg
}

func (c *benchApplyCmd) Validate() error {
	var p config.Problems
	validateAs(&p, "benchapply", c.config().Validate())
	return flagErrors(c, p.Err())
}

func (c *benchApplyCmd) Run(ctx context.Context, e *env) error {
	cfg := c.config()
	redisURL := c.Redis
	if redisURL == "" {
		dir, err := os.MkdirTemp("", "tidemark-bench-redis-")
		if err != nil {
			return err
		}
		pr, err := localserver.NewRedis(localserver.RedisConfig{Dir: dir})
		if err != nil {
			os.RemoveAll(dir)
			return fmt.Errorf("bench apply: start redis-server: %w", err)
		}
		defer pr.Remove()
		redisURL = pr.URL()
	}
	u, err := url.Parse(redisURL)
	if err != nil {
		return usageError(fmt.Errorf("--redis %q: %w", redisURL, err))
	}
	cfg.RedisAddr = u.Host
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return usageError(fmt.Errorf("--redis: %w (bench apply needs a standalone server)", err))
	}
	opt.PoolSize, opt.ContextTimeoutEnabled = 64, true
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: e.log, Registerer: nil})
	if err != nil {
		return err
	}
	b, err := applybench.NewBench(cfg, cc, e.log)
	if err != nil {
		return err
	}
	res, err := b.Run(ctx)
	if err != nil {
		return err
	}
	w := e.stdout
	fmt.Fprintf(w, "| measure | value | goal |\n|---|---|---|\n")
	fmt.Fprintf(w, "| replay: %d events over %d keys, %d partitions | %s, **%.0f events/s** (applied %d, duplicate %d, older %d) | >= 100,000/s |\n",
		res.Events, cfg.Keys, cfg.Partitions, res.ReplayElapsed.Round(time.Millisecond), res.ReplayRate, res.Replay.Applied, res.Replay.Duplicate, res.Replay.Older)
	fmt.Fprintf(w, "| ceiling: redis-benchmark -P 100 -c 50 EVALSHA `return 1` | %.0f req/s | |\n", res.CeilingTrivial)
	fmt.Fprintf(w, "| ceiling: the same, one HSET on a random key | %.0f req/s | |\n", res.CeilingKeyed)
	fmt.Fprintf(w, "| replay / trivial EVALSHA ceiling | **%.2f** | |\n", res.Ratio)
	fmt.Fprintf(w, "| noise floor: redis-benchmark -c 1 PING p99, same run | %s | |\n", ms(res.PingP99))
	fmt.Fprintf(w, "| commit-to-apply at %.0f events/s (%d samples) | p50 %s, **p99 %s**, max %s | p99 < 20 ms |\n",
		res.SteadyRate, res.SteadyEvents, ms(res.P50), ms(res.P99), ms(res.Max))
	return bench.WriteChart(c.SVG, applybench.Chart(cfg, res), w)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
