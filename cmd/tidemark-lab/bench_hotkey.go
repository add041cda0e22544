package main

import (
	"context"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/hotkeybench"
)

// benchHotkeyCmd binds its flags into hotkeybench.Config.
type benchHotkeyCmd struct {
	hotkey hotkeybench.Config
	svg    string
}

func (c *benchHotkeyCmd) Bind(b *cli.Binder) {
	c.hotkey = hotkeybench.DefaultConfig()
	c.svg = "hotkey.svg"
	b.EnvPrefix("")
	b.Flag(&c.hotkey.RedisURL, "redis", "Redis Cluster to benchmark (comma-separated seeds); empty starts a private cluster of --masters redis-servers from PATH. Keys go to the tidemark-bench namespace and expire by themselves.").Env("TIDEMARK_REDIS")
	b.Flag(&c.hotkey.Masters, "masters", "Masters of the private cluster.")
	b.Flag(&c.hotkey.Replicas, "replicas", "Copies of the hot key in the replicas-on mode.")
	b.Flag(&c.hotkey.Workers, "workers", "Concurrent readers of the one key.")
	b.Flag(&c.hotkey.Processes, "processes", "Serve processes the readers are spread over (each holds its own replica manifests).")
	b.Flag(&c.hotkey.Duration, "duration", "Measured time of each mode in each round.")
	b.Flag(&c.hotkey.Load, "load", "Offered rate of both modes as a share of the round's closed-loop ceiling with replicas off.")
	b.Flag(&c.hotkey.Rounds, "rounds", "Rounds of ceiling, replicas off, replicas on; the table shows medians.")
	b.Flag(&c.svg, "svg", "Also write the per-master command-rate chart here as SVG; empty: no chart.")
	b.Flag(&c.hotkey.ColdRounds, "cold-rounds", "Items read from cold through tidemark serve processes, timing their replicas (0: no from-cold phase).")
	b.Flag(&c.hotkey.ColdThreshold, "cold-threshold", "--hot-threshold of the from-cold phase's serve processes (reads/s).")
	b.Flag(&c.hotkey.ColdFactor, "cold-factor", "Offered rate of the from-cold phase as a multiple of --cold-threshold.")
}

func (c *benchHotkeyCmd) Check() error {
	c.hotkey.Binary, _ = tidemarkBinary() // not found: Validate says Binary is not set
	var p config.Problems
	p.Nested("hotkey", c.hotkey.Validate())
	return p.Err()
}

func (c *benchHotkeyCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := hotkeybench.Run(ctx, c.hotkey, hotkeybench.Deps{})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.svg, hotkeybench.Chart)
}
