package main

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/hotkeybench"
)

// benchHotkeyCmd wires flags into hotkeybench.Config.
type benchHotkeyCmd struct {
	Redis     string        `field:"benchhotkey.RedisURL" name:"redis" env:"TIDEMARK_REDIS" help:"Redis Cluster to benchmark (comma-separated seeds); empty starts a private cluster of --masters redis-servers from PATH. Keys go to the tidemark-bench namespace and expire by themselves."`
	Masters   int           `field:"benchhotkey.Masters" name:"masters" default:"${benchhotkey_Masters}" help:"Masters of the private cluster."`
	Replicas  int           `field:"benchhotkey.Replicas" name:"replicas" default:"${benchhotkey_Replicas}" help:"Copies of the hot key in the replicas-on mode."`
	Workers   int           `field:"benchhotkey.Workers" name:"workers" default:"${benchhotkey_Workers}" help:"Concurrent readers of the one key."`
	Processes int           `field:"benchhotkey.Processes" name:"processes" default:"${benchhotkey_Processes}" help:"Serve processes the readers are spread over (each holds its own replica manifests)."`
	Duration  time.Duration `field:"benchhotkey.Duration" name:"duration" default:"${benchhotkey_Duration}" help:"Measured time of each mode in each round."`
	Load      float64       `field:"benchhotkey.Load" name:"load" default:"${benchhotkey_Load}" help:"Offered rate of both modes as a share of the round's closed-loop ceiling with replicas off."`
	Rounds    int           `field:"benchhotkey.Rounds" name:"rounds" default:"${benchhotkey_Rounds}" help:"Rounds of ceiling, replicas off, replicas on; the table shows medians."`
	SVG       string        `name:"svg" default:"hotkey.svg" help:"Also write the per-master command-rate chart here as SVG; empty: no chart."`

	ColdRounds    int     `field:"benchhotkey.ColdRounds" name:"cold-rounds" default:"${benchhotkey_ColdRounds}" help:"Items read from cold through tidemark serve processes, timing their replicas (0: no from-cold phase)."`
	ColdThreshold float64 `field:"benchhotkey.ColdThreshold" name:"cold-threshold" default:"${benchhotkey_ColdThreshold}" help:"--hot-threshold of the from-cold phase's serve processes (reads/s)."`
	ColdFactor    float64 `field:"benchhotkey.ColdFactor" name:"cold-factor" default:"${benchhotkey_ColdFactor}" help:"Offered rate of the from-cold phase as a multiple of --cold-threshold."`
}

func (c *benchHotkeyCmd) config() hotkeybench.Config {
	bin, _ := tidemarkBinary()
	return hotkeybench.Config{RedisURL: c.Redis, Masters: c.Masters, Replicas: c.Replicas, Workers: c.Workers,
		Processes: c.Processes, Duration: c.Duration, Load: c.Load, Rounds: c.Rounds,
		ColdRounds: c.ColdRounds, ColdThreshold: c.ColdThreshold, ColdFactor: c.ColdFactor, Binary: bin}
}

func (c *benchHotkeyCmd) Validate() error {
	return cli.ValidateOne(c, "benchhotkey", c.config().Validate())
}

func (c *benchHotkeyCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := hotkeybench.Run(ctx, c.config(), hotkeybench.Deps{})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.SVG, hotkeybench.Chart)
}
