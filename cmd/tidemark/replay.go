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

// replayCmd binds its flags into applier.ReplayConfig and cache.Config,
// runs the replay with a progress display and prints the summary.
type replayCmd struct {
	replay applier.ReplayConfig
	cache  cache.Config
	redis  cache.RedisConfig
	since  string    // parsed into replay.Since at Check
	now    time.Time // fixed at Check, so --since is resolved once
}

func (c *replayCmd) Bind(b *cli.Binder) {
	c.replay, c.cache, c.redis = applier.DefaultReplayConfig(), cache.DefaultConfig(), cache.DefaultRedisConfig()
	r := &c.replay
	b.Flag(&r.Brokers, "kafka", "Kafka bootstrap brokers, comma-separated (host:port,...).")
	cli.RedisFlags(b, &c.redis, "Cache tier: redis://host:port/db, or a comma-separated seed list for Redis Cluster.")
	b.Flag(&r.Topic, "topic", "Kafka topic of invalidation events.")
	b.Flag(&c.cache.Namespace, "namespace", "Cache-tier key namespace.")
	b.Flag(&r.BackoffMin, "backoff-min", "First retry delay after a cache-tier or Kafka error.")
	b.Flag(&r.BackoffMax, "backoff-max", "Longest retry delay.")
	b.EnvPrefix("")
	b.Flag(&c.since, "since", "Re-apply records from this point: a duration back from now (10m, 1h) or an RFC 3339 time.")
	b.Flag(&r.Partitions, "partitions", "Only these partitions (comma-separated); default all.")
	b.Flag(&r.MaxBatch, "max-batch", "Invalidations per batched cache-tier call.")
	b.Flag(&r.Window, "window", "Records a partition gathers and dedupes by key before applying.")
	cli.CacheFlags(b, &c.cache)
	cli.KafkaFlags(b, &r.Kafka)
	b.Computed(&r.Since, &c.since)
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

func (c *replayCmd) Check() error {
	c.now = time.Now()
	var p config.Problems
	cli.CheckRedis(&p, c.redis)
	if c.redis.URL == "" {
		p.Add("redis.URL", "is required (redis://host:port/db or a Cluster seed list)")
	}
	since, err := parseSince(c.since, c.now)
	if err != nil {
		p.Add("since", "%v", err)
		since = c.now // reported above; keep Validate from repeating it
	}
	c.replay.Since = since
	p.Nested("replay", c.replay.Validate())
	p.Nested("cache", c.cache.Validate())
	return p.Err()
}

func (c *replayCmd) Run(ctx context.Context, e *cli.Env) error {
	cfg := c.replay
	rdb, err := cache.OpenRedis(c.redis, e.Log)
	if err != nil {
		return cli.UsageError(err)
	}
	defer rdb.Close()
	reg := prometheus.NewRegistry() // a one-shot command exposes no metrics
	cc, err := cache.New(c.cache, cache.Deps{Redis: rdb, Log: e.Log, Registerer: reg})
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
