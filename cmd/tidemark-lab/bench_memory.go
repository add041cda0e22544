package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/memorybench"
)

// benchMemoryCmd wires flags into memorybench.Config and prints the report.
type benchMemoryCmd struct {
	Redis         string `field:"benchmemory.RedisURL" name:"redis" env:"TIDEMARK_REDIS" help:"Standalone Redis to measure (redis://host:port/db); empty starts a private redis-server from PATH. Keys go to the tidemark-bench namespace and are deleted after each arm."`
	Entries       int    `field:"benchmemory.Entries" name:"entries" default:"${benchmemory_Entries}" help:"Keys written per arm."`
	Payloads      []int  `field:"benchmemory.Payloads" name:"payloads" default:"${benchmemory_Payloads}" help:"Payload sizes in bytes, one row each."`
	HotKeys       int    `field:"benchmemory.HotKeys" name:"hot-keys" default:"${benchmemory_HotKeys}" help:"Entries given hot-key replicas in the replica arm."`
	Replicas      int    `field:"benchmemory.Replicas" name:"replicas" default:"${benchmemory_Replicas}" help:"Copies per hot key in the replica arm."`
	Workers       int    `field:"benchmemory.Workers" name:"workers" default:"${benchmemory_Workers}" help:"Concurrent lookup-and-fill callers."`
	ListpackValue int    `field:"benchmemory.ListpackValue" name:"listpack-value" default:"${benchmemory_ListpackValue}" help:"Also measure entries with the server's hash-max-listpack-value raised to this (restored after); 0: no such arm."`
	SVG           string `name:"svg" default:"memory.svg" help:"Also write the bytes-per-key chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchMemoryCmd) config() memorybench.Config {
	return memorybench.Config{RedisURL: c.Redis, Entries: c.Entries, Payloads: c.Payloads, HotKeys: c.HotKeys,
		Replicas: c.Replicas, Workers: c.Workers, ListpackValue: c.ListpackValue}
}

func (c *benchMemoryCmd) Validate() error {
	return cli.ValidateOne(c, "benchmemory", c.config().Validate())
}

func (c *benchMemoryCmd) Run(ctx context.Context, e *cli.Env) error {
	cfg := c.config()
	res, err := memorybench.Run(ctx, cfg, memorybench.Deps{Log: e.Log.With("component", "bench")})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.SVG, memorybench.Chart)
}
