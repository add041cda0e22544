package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/inspect"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/schema"
)

type inspectCmd struct {
	cli.TableFlags
	PG    string `field:"inspect.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres DSN of the catalog (the source of truth)."`
	Redis string `field:"inspect.Redis,Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier URL."`
	cli.RedisFlags
	Namespace string        `field:"inspect.Namespace" name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${inspect_Namespace}" help:"Cache-tier key namespace."`
	Sample    int           `field:"inspect.Sample" name:"sample" env:"TIDEMARK_INSPECT_SAMPLE" default:"${inspect_Sample}" help:"Cached entries to check."`
	Tenant    string        `field:"inspect.Tenant" name:"tenant" env:"TIDEMARK_INSPECT_TENANT" help:"Only check this tenant's entries."`
	SLO       time.Duration `field:"inspect.SLO" name:"slo" env:"TIDEMARK_SLO" default:"${inspect_SLO}" help:"Freshness SLO."`
	JSON      bool          `name:"json" help:"Print the report as JSON."`
	Hot       bool          `name:"hot" help:"Print the shared hot set instead: the hottest keys with their read rates, tenants and published read replicas, and every Redis master's command rate (only --redis needed)."`
	Top       int           `field:"Top" name:"top" default:"20" help:"With --hot: how many keys to print."`
}

func (c *inspectCmd) config() inspect.Config {
	return inspect.Config{Redis: c.Redis, RedisConn: c.RedisConn(c.Redis), PG: c.PG, Namespace: c.Namespace, Sample: c.Sample, Tenant: c.Tenant,
		SLO: c.SLO, Table: c.CatalogTable()}
}

func (c *inspectCmd) Validate() error {
	if c.Hot {
		var p config.Problems
		if c.Redis == "" {
			p.Add("Redis", "is required")
		}
		if c.Top < 1 {
			p.Add("Top", "must be at least 1 (got %d)", c.Top)
		}
		return cli.FlagErrors(c, p.Err())
	}
	var p config.Problems
	cli.ValidateAs(&p, "inspect", c.config().Validate())
	c.ValidateRedis(&p, c.Redis)
	return cli.FlagErrors(c, p.Err())
}

// Run exits 1 when an entry would be served while older than the SLO, 2 when
// it could not read.
func (c *inspectCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.Hot {
		return c.runHot(ctx, e)
	}
	rep, err := inspect.Run(ctx, c.config(), e.Log)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitUnreadable, Msg: "inspect: " + err.Error()}
	}
	if err := cli.WriteReport(e.Stdout, rep, c.JSON); err != nil {
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
	rdb, err := cache.OpenRedis(c.RedisConn(c.Redis), e.Log)
	if err != nil {
		return cli.UsageError(err)
	}
	defer rdb.Close()
	top, err := hotset.ReadTop(ctx, rdb, c.Namespace, c.Top, c.Tenant)
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
		rep, err := rdb.HGet(ctx, schema.RedisKey(c.Namespace, h.Tenant, h.Item), cache.FieldReplicas).Result()
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
	if c.JSON {
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
