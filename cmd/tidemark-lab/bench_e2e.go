package main

import (
	"context"
	"os"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/e2ebench"
)

// benchE2ECmd wires flags into e2ebench.Config and prints the report.
type benchE2ECmd struct {
	Kafka        string        `field:"e2e.Brokers" name:"kafka" env:"TIDEMARK_KAFKA" help:"Run against these Kafka brokers instead of starting tidemark-lab kafka."`
	SyncWrites   bool          `field:"e2e.SyncWrites" name:"sync-writes" help:"Start tidemark-lab kafka with --sync-writes (fsync every batch)."`
	TxRate       int           `field:"e2e.TxRate" name:"tx-rate" default:"${e2e_TxRate}" help:"Single-row transactions/s of the first phase and of the pg_recvlogical ceiling."`
	ChangeRate   int           `field:"e2e.ChangeRate" name:"change-rate" default:"${e2e_ChangeRate}" help:"Changes/s of the multi-row phase."`
	RowsPerTx    int           `field:"e2e.RowsPerTx" name:"rows-per-tx" default:"${e2e_RowsPerTx}" help:"Rows per transaction of the multi-row phase."`
	Duration     time.Duration `field:"e2e.Duration" name:"duration" default:"${e2e_Duration}" help:"Length of each measured phase."`
	Drain        time.Duration `field:"e2e.Drain" name:"drain" default:"${e2e_Drain}" help:"How long the tail may take to arrive after a phase's load stops."`
	Keys         int           `field:"e2e.Keys" name:"keys" default:"${e2e_Keys}" help:"Rows each phase cycles through."`
	Partitions   int           `field:"e2e.Partitions" name:"partitions" default:"${e2e_Partitions}" help:"Partitions of the bench topic."`
	Workers      int           `field:"e2e.Workers" name:"workers" default:"${e2e_Workers}" help:"Postgres connections of the load generator."`
	Dir          string        `field:"e2e.Dir" name:"dir" help:"Work directory (servers' data, stage logs) kept after the run; empty: a temp dir, removed."`
	Profile      bool          `field:"e2e.Profile" name:"profile" help:"The stages write CPU profiles to <dir>/<stage>.pprof (needs --dir); read them with go tool pprof -top."`
	Trace        bool          `field:"e2e.Trace" name:"trace" help:"The stages write execution traces to <dir>/<stage>.trace (needs --dir); read them with go tool trace (-pprof=sched shows scheduling waits)."`
	ObserveEvery int           `field:"e2e.ObserveEvery" name:"observe-every" default:"${e2e_ObserveEvery}" help:"Time the changes of every Nth row (1, 10, 100 or 1000): timing every change costs the bench more CPU than any stage."`
	Recvlogical  string        `field:"e2e.Recvlogical" name:"recvlogical" help:"pg_recvlogical binary (default: /usr/lib/postgresql/<newest>/bin or PATH)."`
	SVG          string        `name:"svg" default:"e2e.svg" help:"Also write the latency-against-offered-rate chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchE2ECmd) config() e2ebench.Config {
	cfg := e2ebench.DefaultConfig()
	cfg.Brokers, cfg.SyncWrites = cli.SplitList(c.Kafka), c.SyncWrites
	cfg.TxRate, cfg.ChangeRate, cfg.RowsPerTx, cfg.Duration, cfg.Drain = c.TxRate, c.ChangeRate, c.RowsPerTx, c.Duration, c.Drain
	cfg.Keys, cfg.Partitions, cfg.Workers, cfg.Dir, cfg.Recvlogical, cfg.Profile, cfg.Trace = c.Keys, c.Partitions, c.Workers, c.Dir, c.Recvlogical, c.Profile, c.Trace
	cfg.ObserveEvery = c.ObserveEvery
	cfg.Binary, cfg.LabBinary = "-", "-" // resolved in Run; validated here for the other fields
	return cfg
}

func (c *benchE2ECmd) Validate() error { return cli.ValidateOne(c, "e2e", c.config().Validate()) }

func (c *benchE2ECmd) Run(ctx context.Context, e *cli.Env) error {
	cfg := c.config()
	bin, err := tidemarkBinary()
	if err != nil {
		return err
	}
	if cfg.LabBinary, err = os.Executable(); err != nil {
		return err
	}
	cfg.Binary = bin
	res, err := e2ebench.Run(ctx, cfg, e2ebench.Deps{Log: e.Log.With("component", "bench")})
	if err != nil {
		return err
	}
	return bench.Print(e.Stdout, res, c.SVG, e2ebench.Chart)
}
