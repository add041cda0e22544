package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/schema"
)

type inspectCmd struct {
	inspect inspect.Config
	table   catalog.Table
	redis   cache.RedisConfig
	json    bool
	hot     bool
	top     int
}

func (c *inspectCmd) Bind(b *cli.Binder) {
	c.inspect, c.redis, c.top = inspect.DefaultConfig(), cache.DefaultRedisConfig(), 20
	in := &c.inspect
	c.table = in.Table
	cli.TableFlags(b, &c.table)
	b.Flag(&in.PG, "pg", "Postgres DSN of the catalog (the source of truth).")
	cli.RedisFlags(b, &c.redis, "Cache tier URL.")
	b.Flag(&in.Namespace, "namespace", "Cache-tier key namespace.")
	b.Flag(&in.Sample, "sample", "Cached entries to check.").Env("TIDEMARK_INSPECT_SAMPLE")
	b.Flag(&in.Tenant, "tenant", "Only check this tenant's entries.").Env("TIDEMARK_INSPECT_TENANT")
	b.Flag(&in.SLO, "slo", "Freshness SLO.")
	b.EnvPrefix("")
	b.Flag(&c.json, "json", "Print the report as JSON.")
	b.Flag(&c.hot, "hot", "Print the shared hot set instead: the hottest keys with their read rates, tenants and published read replicas, and every Redis master's command rate (only --redis needed).")
	b.Flag(&c.top, "top", "With --hot: how many keys to print.")
	b.Derive(&in.Table, &c.table)
	b.Derive(&in.Redis, &c.redis.URL)
	b.Derive(&in.RedisConn, &c.redis)
}

func (c *inspectCmd) Check() error {
	var p config.Problems
	if c.hot {
		if c.redis.URL == "" {
			p.Add("redis.URL", "is required")
		}
		if c.top < 1 {
			p.Add("top", "must be at least 1 (got %d)", c.top)
		}
		return p.Err()
	}
	p.Nested("inspect", c.inspect.Validate())
	cli.CheckRedis(&p, c.redis)
	return p.Err()
}

// Run exits 1 when an entry would be served while older than the SLO, 2 when
// it could not read.
func (c *inspectCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.hot {
		return c.runHot(ctx, e)
	}
	rep, err := inspect.Run(ctx, c.inspect, e.Log)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitUnreadable, Msg: "inspect: " + err.Error()}
	}
	if err := cli.WriteReport(e.Stdout, rep, c.json); err != nil {
		return err
	}
	if rep.Violations > 0 {
		return &cli.ExitError{Code: cli.ExitFailure, Msg: "inspect: entries would be served while older than the SLO"}
	}
	return nil
}

// runHot prints the namespace's hot set as merged by the serve processes,
// with the number of read replicas each key has published, and every
// master's command rate (how the load spreads over a Cluster).
func (c *inspectCmd) runHot(ctx context.Context, e *cli.Env) error {
	rdb, err := cache.OpenRedis(c.redis, e.Log)
	if err != nil {
		return cli.UsageError(err)
	}
	defer rdb.Close()
	top, err := hotset.ReadTop(ctx, rdb, c.inspect.Namespace, c.top, c.inspect.Tenant)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitUnreadable, Msg: "inspect: " + err.Error()}
	}
	type hotKey struct {
		hotset.Hot
		Replicas int `json:"replicas"` // copies in the published manifest; 0: none
	}
	keys := make([]hotKey, len(top))
	for i, h := range top {
		keys[i].Hot = h
		rep, err := rdb.HGet(ctx, schema.RedisKey(c.inspect.Namespace, h.Tenant, h.Item), cache.FieldReplicas).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return &cli.ExitError{Code: cli.ExitUnreadable, Msg: "inspect: " + err.Error()}
		}
		if m, err := cache.ParseManifest(rep); err == nil {
			keys[i].Replicas = m.N()
		}
	}
	nodes, err := cache.NodeRates(ctx, rdb)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitUnreadable, Msg: "inspect: " + err.Error()}
	}
	if c.json {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Keys  []hotKey         `json:"keys"`
			Nodes []cache.NodeRate `json:"nodes"`
		}{keys, nodes})
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	if len(keys) == 0 {
		fmt.Fprintln(tw, "hot set is empty: no serve process has merged its read counts yet")
	} else {
		fmt.Fprintln(tw, "rank\ttenant\titem\treads/s\treplicas")
		for i, h := range keys {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t%d\n", i+1, h.Tenant, h.Item, h.Rate, h.Replicas)
		}
	}
	fmt.Fprintln(tw, "\nnode\tcommands/s")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%.0f\n", n.Addr, n.OpsPerSec)
	}
	return tw.Flush()
}
