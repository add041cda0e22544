package main

import (
	"context"
	"runtime"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/capturebench"
)

// benchCaptureCmd wires flags into capturebench.Config
// (lab/bench/capturebench) and prints the table.
type benchCaptureCmd struct {
	PG          string        `field:"benchcapture.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres to benchmark (it is migrated and written to); empty starts a private server."`
	Rows        int           `field:"benchcapture.Rows" name:"rows" default:"${benchcapture_Rows}" help:"Row changes in the fixed WAL workload."`
	Rate        int           `field:"benchcapture.Rate" name:"rate" default:"${benchcapture_Rate}" help:"Changes/s of the steady latency phase."`
	Duration    time.Duration `field:"benchcapture.Duration" name:"duration" default:"${benchcapture_Duration}" help:"Length of the steady latency phase."`
	Partitions  int           `field:"benchcapture.Partitions" name:"partitions" default:"${benchcapture_Partitions}" help:"Partitions of the bench topic."`
	Rounds      int           `field:"benchcapture.Rounds" name:"rounds" default:"${benchcapture_Rounds}" help:"Drains of each kind, alternating; the median is reported."`
	MaxProcs    int           `field:"MaxProcs" name:"max-procs" default:"1" help:"GOMAXPROCS while benchmarking, as tidemark capture's --max-procs (0 = one per core)."`
	Recvlogical string        `field:"benchcapture.Recvlogical" name:"recvlogical" help:"pg_recvlogical binary (default: /usr/lib/postgresql/<newest>/bin or PATH)."`
	SVG         string        `name:"svg" default:"capture.svg" help:"Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchCaptureCmd) config() capturebench.Config {
	cfg := capturebench.DefaultConfig()
	cfg.PG, cfg.Rows, cfg.Rate, cfg.Duration, cfg.Partitions, cfg.Recvlogical = c.PG, c.Rows, c.Rate, c.Duration, c.Partitions, c.Recvlogical
	cfg.Rounds = c.Rounds
	return cfg
}

func (c *benchCaptureCmd) Validate() error {
	var p config.Problems
	cli.ValidateAs(&p, "benchcapture", c.config().Validate())
	if c.MaxProcs < 0 {
		p.Add("MaxProcs", "must not be negative (got %d)", c.MaxProcs)
	}
	return cli.FlagErrors(c, p.Err())
}

func (c *benchCaptureCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.MaxProcs > 0 {
		runtime.GOMAXPROCS(c.MaxProcs)
	}
	res, err := capturebench.Run(ctx, c.config(), capturebench.Deps{Log: e.Log.With("component", "bench")})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.SVG, capturebench.Chart)
}
