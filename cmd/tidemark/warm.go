package main

import (
	"context"
	"fmt"
	"time"

	"tidemark/cache"
	"tidemark/warm"
)

// warmCmd queues a warm request for the elected warmer of a serve process
// and, with --wait, follows its progress.
type warmCmd struct {
	Redis     string        `name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier URL."`
	Namespace string        `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${warm_Namespace}" help:"Cache namespace."`
	Top       int           `name:"top" default:"${warm_Top}" help:"Warm this many of the hottest keys."`
	Tenant    string        `name:"tenant" help:"Only this tenant's hottest keys."`
	Wait      time.Duration `name:"wait" default:"0s" help:"Follow the run for up to this long (0: just queue the request)."`
}

func (c *warmCmd) Validate() error {
	var p []string
	if c.Redis == "" {
		p = append(p, "--redis (TIDEMARK_REDIS) is required")
	}
	if c.Top < 1 {
		p = append(p, fmt.Sprintf("--top %d must be at least 1", c.Top))
	}
	if c.Wait < 0 {
		p = append(p, "--wait must not be negative")
	}
	if len(p) > 0 {
		return joinProblems(p)
	}
	return nil
}

func (c *warmCmd) Run(ctx context.Context, e *env) error {
	rdb, err := cache.ParseRedisURL(c.Redis)
	if err != nil {
		return usageError(err)
	}
	defer rdb.Close()
	at := time.Now()
	if err := warm.Enqueue(ctx, rdb, c.Namespace, warm.Request{Top: c.Top, Tenant: c.Tenant, At: at.UnixMilli()}); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "queued: warm the %d hottest keys; the elected warmer of a running serve process picks it up within a second\n", c.Top)
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
		fmt.Fprintln(e.stdout, p)
		if p.State == "done" {
			return nil
		}
	}
	return &exitError{code: exitFailure, msg: fmt.Sprintf("warm: not finished after %s (is a serve process running?)", c.Wait)}
}
