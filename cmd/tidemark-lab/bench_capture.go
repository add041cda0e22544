package main

import (
	"context"
	"runtime"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/capturebench"
)

// benchCaptureCmd binds its flags into capturebench.Config
// (lab/bench/capturebench) and prints the table.
type benchCaptureCmd struct {
	capture  capturebench.Config
	maxProcs int
	svg      string
}

func (c *benchCaptureCmd) Bind(b *cli.Binder) {
	c.capture = capturebench.DefaultConfig()
	c.maxProcs = 1
	c.svg = "capture.svg"
	b.EnvPrefix("")
	b.Flag(&c.capture.PG, "pg", "Postgres to benchmark (it is migrated and written to); empty starts a private server.").Env("TIDEMARK_PG")
	b.Flag(&c.capture.Rows, "rows", "Row changes in the fixed WAL workload.")
	b.Flag(&c.capture.Rate, "rate", "Changes/s of the steady latency phase.")
	b.Flag(&c.capture.Duration, "duration", "Length of the steady latency phase.")
	b.Flag(&c.capture.Partitions, "partitions", "Partitions of the bench topic.")
	b.Flag(&c.capture.Rounds, "rounds", "Drains of each kind, alternating; the median is reported.")
	b.Flag(&c.maxProcs, "max-procs", "GOMAXPROCS while benchmarking, as tidemark capture's --max-procs (0 = one per core).")
	b.Flag(&c.capture.Recvlogical, "recvlogical", "pg_recvlogical binary (default: /usr/lib/postgresql/<newest>/bin or PATH).")
	b.Flag(&c.svg, "svg", "Also write the throughput-against-ceiling chart here as SVG (the file named under the table); empty: no chart.")
}

func (c *benchCaptureCmd) Check() error {
	var p config.Problems
	p.Nested("capture", c.capture.Validate())
	if c.maxProcs < 0 {
		p.Add("maxProcs", "must not be negative (got %d)", c.maxProcs)
	}
	return p.Err()
}

func (c *benchCaptureCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.maxProcs > 0 {
		runtime.GOMAXPROCS(c.maxProcs)
	}
	res, err := capturebench.Run(ctx, c.capture, capturebench.Deps{Log: e.Log.With("component", "bench")})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.svg, capturebench.Chart)
}
