package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/memorybench"
)

// benchMemoryCmd binds its flags into memorybench.Config and prints the report.
type benchMemoryCmd struct {
	memory memorybench.Config
	svg    string
}

func (c *benchMemoryCmd) Bind(b *cli.Binder) {
	c.memory = memorybench.DefaultConfig()
	c.svg = "memory.svg"
	b.EnvPrefix("")
	b.Flag(&c.memory.RedisURL, "redis", "Standalone Redis to measure (redis://host:port/db); empty starts a private redis-server from PATH. Keys go to the tidemark-bench namespace and are deleted after each arm.").Env("TIDEMARK_REDIS")
	b.Flag(&c.memory.Entries, "entries", "Keys written per arm.")
	b.Flag(&c.memory.Payloads, "payloads", "Payload sizes in bytes, one row each.")
	b.Flag(&c.memory.HotKeys, "hot-keys", "Entries given hot-key replicas in the replica arm.")
	b.Flag(&c.memory.Replicas, "replicas", "Copies per hot key in the replica arm.")
	b.Flag(&c.memory.Workers, "workers", "Concurrent lookup-and-fill callers.")
	b.Flag(&c.memory.ListpackValue, "listpack-value", "Also measure entries with the server's hash-max-listpack-value raised to this (restored after); 0: no such arm.")
	b.Flag(&c.svg, "svg", "Also write the bytes-per-key chart here as SVG (the file named under the table); empty: no chart.")
}

func (c *benchMemoryCmd) Check() error {
	var p config.Problems
	p.Nested("memory", c.memory.Validate())
	return p.Err()
}

func (c *benchMemoryCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := memorybench.Run(ctx, c.memory, memorybench.Deps{Log: e.Log.With("component", "bench")})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.svg, memorybench.Chart)
}
