package main

import (
	"context"
	"os"
	"time"

	"tidemark/internal/bench"
	"tidemark/internal/bench/e2e"
)

// benchE2ECmd wires flags into e2e.Config and prints the report.
type benchE2ECmd struct {
	Kafka       string        `name:"kafka" env:"TIDEMARK_KAFKA" help:"Run against these Kafka brokers instead of starting tidemark kafka."`
	SyncWrites  bool          `name:"sync-writes" help:"Start tidemark kafka with --sync-writes (fsync every batch)."`
	TxRate      int           `name:"tx-rate" default:"2000" help:"Single-row transactions/s of the first phase and of the pg_recvlogical ceiling."`
	ChangeRate  int           `name:"change-rate" default:"20000" help:"Changes/s of the multi-row phase."`
	RowsPerTx   int           `name:"rows-per-tx" default:"20" help:"Rows per transaction of the multi-row phase."`
	Duration    time.Duration `name:"duration" default:"60s" help:"Length of each measured phase."`
	Drain       time.Duration `name:"drain" default:"30s" help:"How long the tail may take to arrive after a phase's load stops."`
	Keys        int           `name:"keys" default:"100000" help:"Rows each phase cycles through."`
	Partitions  int           `name:"partitions" default:"12" help:"Partitions of the bench topic."`
	Workers     int           `name:"workers" default:"32" help:"Postgres connections of the load generator."`
	Dir         string        `name:"dir" help:"Work directory (servers' data, stage logs) kept after the run; empty: a temp dir, removed."`
	Profile     bool          `name:"profile" help:"The stages write CPU profiles to <dir>/<stage>.pprof (needs --dir); read them with go tool pprof -top."`
	Recvlogical string        `name:"recvlogical" help:"pg_recvlogical binary (default: /usr/lib/postgresql/<newest>/bin or PATH)."`
	SVG         string        `name:"svg" default:"e2e.svg" help:"Also write the latency-against-offered-rate chart here as SVG (the file named under the table); empty: no chart."`
}

func (c *benchE2ECmd) config() e2e.Config {
	cfg := e2e.DefaultConfig()
	cfg.Brokers, cfg.SyncWrites = splitList(c.Kafka), c.SyncWrites
	cfg.TxRate, cfg.ChangeRate, cfg.RowsPerTx, cfg.Duration, cfg.Drain = c.TxRate, c.ChangeRate, c.RowsPerTx, c.Duration, c.Drain
	cfg.Keys, cfg.Partitions, cfg.Workers, cfg.Dir, cfg.Recvlogical, cfg.Profile = c.Keys, c.Partitions, c.Workers, c.Dir, c.Recvlogical, c.Profile
	cfg.Binary = "-" // resolved in Run; validated here for the other fields
	return cfg
}

func (c *benchE2ECmd) Validate() error { return c.config().Validate() }

func (c *benchE2ECmd) Run(ctx context.Context, e *env) error {
	cfg := c.config()
	bin, err := os.Executable()
	if err != nil {
		return err
	}
	cfg.Binary = bin
	res, err := e2e.Run(ctx, cfg, e.log.With("component", "bench"))
	if err != nil {
		return err
	}
	e2e.Report(e.stdout, cfg, res)
	return bench.WriteChart(c.SVG, e2e.Chart(cfg, res), e.stdout)
}
