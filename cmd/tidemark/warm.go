package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/warm"
)

// warmCmd queues a warm request for the elected warmer of a serve process
// and, with --wait, follows its progress.
type warmCmd struct {
	redis     cache.RedisConfig
	namespace string
	request   warm.Request
	wait      time.Duration
}

func (c *warmCmd) Bind(b *cli.Binder) {
	c.redis = cache.DefaultRedisConfig()
	def := warm.DefaultConfig()
	c.namespace, c.request.Top = def.Namespace, def.Top
	cli.RedisFlags(b, &c.redis, "Cache tier URL.")
	b.Flag(&c.namespace, "namespace", "Cache namespace.")
	b.EnvPrefix("")
	b.Flag(&c.request.Top, "top", "Warm this many of the hottest keys.")
	b.Flag(&c.request.Tenant, "tenant", "Only this tenant's hottest keys.")
	b.Flag(&c.wait, "wait", "Follow the run for up to this long (0: just queue the request).")
}

func (c *warmCmd) Check() error {
	var p config.Problems
	cli.CheckRedis(&p, c.redis)
	if c.redis.URL == "" {
		p.Add("redis.URL", "is required")
	}
	if c.request.Top < 1 {
		p.Add("request.Top", "must be at least 1 (got %d)", c.request.Top)
	}
	if c.wait < 0 {
		p.Add("wait", "must not be negative (got %s)", c.wait)
	}
	return p.Err()
}

func (c *warmCmd) Run(ctx context.Context, e *cli.Env) error {
	rdb, err := cache.OpenRedis(c.redis, e.Log)
	if err != nil {
		return cli.UsageError(err)
	}
	defer rdb.Close()
	at := time.Now()
	req := c.request
	req.At = at.UnixMilli()
	if err := warm.Enqueue(ctx, rdb, c.namespace, req); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "queued: warm the %d hottest keys; the elected warmer of a running serve process picks it up within a second\n", c.request.Top)
	if c.wait == 0 {
		return nil
	}
	deadline := time.Now().Add(c.wait)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p, ok, err := warm.ReadProgress(ctx, rdb, c.namespace)
		if err != nil || !ok || p.Started.Before(at.Add(-time.Second)) {
			continue // not picked up yet
		}
		fmt.Fprintln(e.Stdout, p)
		if p.State == "done" {
			return nil
		}
	}
	return &cli.ExitError{Code: cli.ExitFailure, Msg: fmt.Sprintf("warm: not finished after %s (is a serve process running?)", c.wait)}
}
