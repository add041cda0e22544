package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
)

// replayCmd wires flags into applier.ReplayConfig, runs the replay with a
// progress display and prints the summary.
type replayCmd struct {
	Kafka      string        `field:"replay.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Kafka bootstrap brokers, comma-separated (host:port,...)."`
	Redis      string        `field:"Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier: redis://host:port/db, or a comma-separated seed list for Redis Cluster."`
	Topic      string        `field:"replay.Topic" name:"topic" env:"TIDEMARK_TOPIC" default:"${replay_Topic}" help:"Kafka topic of invalidation events."`
	Namespace  string        `field:"cache.Namespace" name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${cache_Namespace}" help:"Cache-tier key namespace."`
	Since      string        `field:"replay.Since" name:"since" help:"Re-apply records from this point: a duration back from now (10m, 1h) or an RFC 3339 time."`
	Partitions []int32       `field:"replay.Partitions" name:"partitions" sep:"," help:"Only these partitions (comma-separated); default all."`
	MaxBatch   int           `field:"replay.MaxBatch" name:"max-batch" default:"${replay_MaxBatch}" help:"Invalidations per batched cache-tier call."`
	Window     int           `field:"replay.Window" name:"window" default:"${replay_Window}" help:"Records a partition gathers and dedupes by key before applying."`
	BackoffMin time.Duration `field:"replay.BackoffMin" name:"backoff-min" env:"TIDEMARK_BACKOFF_MIN" default:"${replay_BackoffMin}" help:"First retry delay after a cache-tier or Kafka error."`
	BackoffMax time.Duration `field:"replay.BackoffMax" name:"backoff-max" env:"TIDEMARK_BACKOFF_MAX" default:"${replay_BackoffMax}" help:"Longest retry delay."`
	cli.CacheFlags
	cli.KafkaFlags
	cli.RedisFlags

	now time.Time // fixed at Validate, so --since is resolved once
}

// parseSince accepts a duration back from now or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %q: a duration must be positive (it counts back from now)", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q is neither a duration (10m) nor an RFC 3339 time", s)
	}
	return t, nil
}

func (c *replayCmd) config() (applier.ReplayConfig, error) {
	if c.now.IsZero() {
		c.now = time.Now()
	}
	cfg := applier.DefaultReplayConfig()
	cfg.Brokers, cfg.Kafka = cli.SplitList(c.Kafka), c.KafkaConn()
	cfg.Topic, cfg.Partitions, cfg.MaxBatch, cfg.Window = c.Topic, c.Partitions, c.MaxBatch, c.Window
	cfg.BackoffMin, cfg.BackoffMax = c.BackoffMin, c.BackoffMax
	var err error
	cfg.Since, err = parseSince(c.Since, c.now)
	return cfg, err
}

func (c *replayCmd) cacheConfig() cache.Config { return c.CacheTier(c.Namespace) }

func (c *replayCmd) Validate() error {
	cfg, err := c.config()
	var p config.Problems
	c.ValidateRedis(&p, c.Redis)
	if c.Redis == "" {
		p.Add("Redis", "is required (redis://host:port/db or a Cluster seed list)")
	}
	ccfg := c.cacheConfig()
	if err != nil {
		p.Add("replay.Since", "%v", err)
		cfg.Since = c.now // reported above; keep Validate from repeating it
	}
	cli.ValidateAs(&p, "replay", cfg.Validate())
	cli.ValidateAs(&p, "cache", ccfg.Validate())
	return cli.FlagErrors(c, p.Err())
}

func (c *replayCmd) Run(ctx context.Context, e *cli.Env) error {
	cfg, err := c.config()
	if err != nil {
		return cli.UsageError(err)
	}
	rdb, err := cache.OpenRedis(c.RedisConn(c.Redis), e.Log)
	if err != nil {
		return cli.UsageError(err)
	}
	defer rdb.Close()
	reg := prometheus.NewRegistry() // a one-shot command exposes no metrics
	cc, err := cache.New(c.cacheConfig(), cache.Deps{Redis: rdb, Log: e.Log, Registerer: reg})
	if err != nil {
		return err
	}
	r, err := applier.NewReplay(cfg, applier.Deps{Cache: cc, Log: e.Log, Registerer: reg})
	if err != nil {
		return err
	}
	var sum applier.ReplaySummary
	var g lifecycle.Group
	g.Add(lifecycle.Apply, "replay", func(ctx context.Context) (err error) { sum, err = r.Run(ctx); return err })
	g.Add(lifecycle.Observe, "progress", func(ctx context.Context) error { showProgress(ctx, e.Stderr, r); return nil })
	if err := g.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "replayed %d records from %s in %s (%.0f records/s): applied %d, duplicate %d, older %d, dlq %d\n",
		sum.Records, cfg.Since.UTC().Format(time.RFC3339), sum.Elapsed.Round(time.Millisecond),
		float64(sum.Records)/max(sum.Elapsed.Seconds(), 1e-9), sum.Applied, sum.Duplicate, sum.Older, sum.DLQ)
	if len(sum.Gaps) > 0 {
		fmt.Fprintf(e.Stdout, "retention gap: %d partition(s) had records from %s on deleted by the topic's retention before this replay; "+
			"reset_at raised to %s, so cached entries observed before it expire at their hard lifetime instead of being extended\n",
			len(sum.Gaps), cfg.Since.UTC().Format(time.RFC3339), sum.ResetAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// showProgress draws a progress bar (events, rate, ETA) on a terminal and
// prints plain progress lines otherwise (logs, CI).
func showProgress(ctx context.Context, w io.Writer, r *applier.Replay) {
	f, isFile := w.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	var bar *progressbar.ProgressBar
	tick := 5 * time.Second
	if tty {
		tick = 100 * time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	for {
		done, total := r.Progress()
		if tty && total > 0 {
			if bar == nil {
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription("replay"),
					progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString("events"),
					progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionFullWidth())
			}
			bar.Set64(done)
		}
		select {
		case <-ctx.Done():
			if bar != nil {
				done, _ = r.Progress()
				bar.Set64(done)
				fmt.Fprintln(w)
			}
			return
		case <-t.C:
		}
		if !tty && total > 0 {
			el := time.Since(start).Seconds()
			rate := float64(done) / max(el, 1e-9)
			eta := "?"
			if rate > 0 {
				eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
			}
			fmt.Fprintf(w, "replay: %d/%d events (%s), %.0f events/s, ETA %s\n", done, total, pct(done, total), rate, eta)
		}
	}
}

func pct(done, total int64) string {
	if total == 0 {
		return "100%"
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", 100*float64(done)/float64(total)), ".0") + "%"
}
