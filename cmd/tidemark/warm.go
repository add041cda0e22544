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
	Redis     string `field:"Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier URL."`
	Namespace string `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${warm_Namespace}" help:"Cache namespace."`
	Top       int    `field:"Top" name:"top" default:"${warm_Top}" help:"Warm this many of the hottest keys."`
	Tenant    string `name:"tenant" help:"Only this tenant's hottest keys."`
	cli.RedisFlags
	Wait time.Duration `field:"Wait" name:"wait" default:"0s" help:"Follow the run for up to this long (0: just queue the request)."`
}

func (c *warmCmd) Validate() error {
	var p config.Problems
	c.ValidateRedis(&p, c.Redis)
	if c.Redis == "" {
		p.Add("Redis", "is required")
	}
	if c.Top < 1 {
		p.Add("Top", "must be at least 1 (got %d)", c.Top)
	}
	if c.Wait < 0 {
		p.Add("Wait", "must not be negative (got %s)", c.Wait)
	}
	return cli.FlagErrors(c, p.Err())
}

func (c *warmCmd) Run(ctx context.Context, e *cli.Env) error {
	rdb, err := cache.OpenRedis(c.RedisConn(c.Redis), e.Log)
	if err != nil {
		return cli.UsageError(err)
	}
	defer rdb.Close()
	at := time.Now()
	if err := warm.Enqueue(ctx, rdb, c.Namespace, warm.Request{Top: c.Top, Tenant: c.Tenant, At: at.UnixMilli()}); err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "queued: warm the %d hottest keys; the elected warmer of a running serve process picks it up within a second\n", c.Top)
	if c.Wait == 0 {
		return nil
	}
	deadline := time.Now().Add(c.Wait)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p, ok, err := warm.ReadProgress(ctx, rdb, c.Namespace)
		if err != nil || !ok || p.Started.Before(at.Add(-time.Second)) {
			continue // not picked up yet
		}
		fmt.Fprintln(e.Stdout, p)
		if p.State == "done" {
			return nil
		}
	}
	return &cli.ExitError{Code: cli.ExitFailure, Msg: fmt.Sprintf("warm: not finished after %s (is a serve process running?)", c.Wait)}
}
