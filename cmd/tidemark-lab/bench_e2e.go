package main

import (
	"context"
	"os"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/lab/bench/e2ebench"
)

// benchE2ECmd binds its flags into e2ebench.Config and prints the report.
type benchE2ECmd struct {
	e2e e2ebench.Config
	svg string
}

func (c *benchE2ECmd) Bind(b *cli.Binder) {
	c.e2e = e2ebench.DefaultConfig()
	c.svg = "e2e.svg"
	b.EnvPrefix("")
	b.Flag(&c.e2e.Brokers, "kafka", "Run against these Kafka brokers instead of starting tidemark-lab kafka.").Env("TIDEMARK_KAFKA")
	b.Flag(&c.e2e.SyncWrites, "sync-writes", "Start tidemark-lab kafka with --sync-writes (fsync every batch).")
	b.Flag(&c.e2e.TxRate, "tx-rate", "Single-row transactions/s of the first phase and of the pg_recvlogical ceiling.")
	b.Flag(&c.e2e.ChangeRate, "change-rate", "Changes/s of the multi-row phase.")
	b.Flag(&c.e2e.RowsPerTx, "rows-per-tx", "Rows per transaction of the multi-row phase.")
	b.Flag(&c.e2e.Duration, "duration", "Length of each measured phase.")
	b.Flag(&c.e2e.Drain, "drain", "How long the tail may take to arrive after a phase's load stops.")
	b.Flag(&c.e2e.Keys, "keys", "Rows each phase cycles through.")
	b.Flag(&c.e2e.Partitions, "partitions", "Partitions of the bench topic.")
	b.Flag(&c.e2e.Workers, "workers", "Postgres connections of the load generator.")
	b.Flag(&c.e2e.Dir, "dir", "Work directory (servers' data, stage logs) kept after the run; empty: a temp dir, removed.")
	b.Flag(&c.e2e.Profile, "profile", "The stages write CPU profiles to <dir>/<stage>.pprof (needs --dir); read them with go tool pprof -top.")
	b.Flag(&c.e2e.Trace, "trace", "The stages write execution traces to <dir>/<stage>.trace (needs --dir); read them with go tool trace (-pprof=sched shows scheduling waits).")
	b.Flag(&c.e2e.ObserveEvery, "observe-every", "Time the changes of every Nth row (1, 10, 100 or 1000): timing every change costs the bench more CPU than any stage.")
	b.Flag(&c.e2e.Debezium, "debezium", "Also measure Debezium's embedded engine (3.6.1, poll 1 ms, batches of 256) under the single-row load, commit → its callback, against tidemark's commit → applied (needs the jar: make debezium).")
	b.Flag(&c.e2e.DebeziumJar, "debezium-jar", "The jar `make debezium` builds, for --debezium.")
	b.Flag(&c.e2e.Recvlogical, "recvlogical", "pg_recvlogical binary (default: /usr/lib/postgresql/<newest>/bin or PATH).")
	b.Flag(&c.e2e.CaptureArgs, "capture-arg", "Extra flag for the capture process (repeatable), e.g. --capture-arg=--linger=0.")
	b.Flag(&c.e2e.ApplyArgs, "apply-arg", "Extra flag for the apply process (repeatable).")
	b.Flag(&c.svg, "svg", "Also write the latency-against-offered-rate chart here as SVG (the file named under the table); empty: no chart.")
}

func (c *benchE2ECmd) Check() error {
	cfg := c.e2e
	cfg.Binary, cfg.LabBinary = "-", "-" // resolved in Run; checked here for the other fields
	var p config.Problems
	p.Nested("e2e", cfg.Validate())
	return p.Err()
}

func (c *benchE2ECmd) Run(ctx context.Context, e *cli.Env) error {
	cfg := c.e2e
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
	return bench.Print(e.Stdout, res, c.svg, e2ebench.Chart)
}
