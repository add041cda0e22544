package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"tidemark/internal/config"
	"tidemark/lab/bench"
	"tidemark/lab/bench/capturebench"
)

// benchCaptureCmd wires flags into capturebench.BenchConfig (lab/bench/capturebench), provides Postgres
// (a private server unless --pg) and prints the table.
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

func (c *benchCaptureCmd) config() capturebench.BenchConfig {
	cfg := capturebench.DefaultBenchConfig()
	cfg.PG, cfg.Rows, cfg.Rate, cfg.Duration, cfg.Partitions, cfg.Recvlogical = c.PG, c.Rows, c.Rate, c.Duration, c.Partitions, c.Recvlogical
	cfg.Rounds = c.Rounds
	return cfg
}

func (c *benchCaptureCmd) Validate() error {
	var p config.Problems
	validateAs(&p, "benchcapture", c.config().Validate())
	if c.MaxProcs < 0 {
		p.Add("MaxProcs", "must not be negative (got %d)", c.MaxProcs)
	}
	return flagErrors(c, p.Err())
}

func (c *benchCaptureCmd) Run(ctx context.Context, e *env) error {
	if c.MaxProcs > 0 {
		runtime.GOMAXPROCS(c.MaxProcs)
	}
	cfg := c.config()
	if cfg.PG == "" {
		dsn, stop, err := capturebench.StartPostgres()
		if err != nil {
			return err
		}
		defer stop()
		cfg.PG = dsn
	}
	res, err := capturebench.Bench(ctx, cfg, e.log.With("component", "bench"))
	if err != nil {
		return err
	}
	w := e.stdout
	rounds := func(ds []time.Duration) string {
		var s []string
		for _, d := range ds {
			s = append(s, d.Round(time.Millisecond).String())
		}
		return strings.Join(s, ", ")
	}
	fmt.Fprintf(w, "| drain of %d row changes (pgoutput, same publication) | rounds | median | changes/s |\n|---|---|---|---|\n", res.Rows)
	fmt.Fprintf(w, "| pg_recvlogical (ceiling) | %s | %s | %.0f |\n", rounds(res.RecvlogicalRounds), res.RecvlogicalElapsed.Round(time.Millisecond), res.RecvlogicalRate())
	fmt.Fprintf(w, "| tidemark capture -> kfake (acked) | %s | %s | %.0f |\n", rounds(res.CaptureRounds), res.CaptureElapsed.Round(time.Millisecond), res.CaptureRate())
	fmt.Fprintf(w, "\nGOMAXPROCS %d; ratio capture / pg_recvlogical: %.2fx (goal >= 0.80x)\n", runtime.GOMAXPROCS(0), res.CaptureRate()/res.RecvlogicalRate())
	fmt.Fprintf(w, "commit-to-produced at %d changes/s for %s (%d samples): p50 %s, p99 %s, max %s (goal p99 < 20ms)\n",
		cfg.Rate, cfg.Duration, res.LatencySamples, res.P50.Round(10*time.Microsecond), res.P99.Round(10*time.Microsecond), res.Max.Round(10*time.Microsecond))
	return bench.WriteChart(c.SVG, capturebench.Chart(res), w)
}
