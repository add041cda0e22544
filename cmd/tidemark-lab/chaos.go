package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/chaos"
)

// chaosCmd wires flags into chaos.Config and prints the report; exit 0 only
// with zero violations.
type chaosCmd struct {
	cli.TableFlags
	Duration    time.Duration `field:"chaos.Duration" name:"duration" env:"TIDEMARK_CHAOS_DURATION" default:"${chaos_Duration}" help:"How long load and faults run (setup and the final check come on top)."`
	Seed        int64         `field:"chaos.Seed" name:"seed" env:"TIDEMARK_CHAOS_SEED" default:"${chaos_Seed}" help:"Seed of the fault schedule and the load."`
	Faults      string        `field:"chaos.Faults" name:"faults" env:"TIDEMARK_CHAOS_FAULTS" default:"all" help:"Fault kinds, comma-separated, or all / none. Kinds: kill-capture, kill-apply, kill-serve, stop-capture, stop-apply, stop-serve, redis-restart, redis-old-snapshot, redis-refuse-writes, redis-hung, pg-restart, source-stall, slot-drop, broker-restart, clock-offset, cold-burst, cluster-reshard, cluster-kill-master, long-outage, redis-loss-appliers-down, future-heartbeat, malformed-heartbeat, truncate-fast-clock, min-version-expired-floors, shared-http-cache, sync-standby-stall, primary-promotion, cold-start (all includes primary-promotion only in runs of 5m or more)."`
	FaultEvery  time.Duration `field:"chaos.FaultEvery" name:"fault-every" env:"TIDEMARK_CHAOS_FAULT_EVERY" default:"${chaos_FaultEvery}" help:"Mean spacing of faults (the dense schedule: closer when needed to fit every kind in the run; the sparse one: exactly this, at least 1m)."`
	Schedule    string        `field:"chaos.Schedule" name:"schedule" env:"TIDEMARK_CHAOS_SCHEDULE" default:"${chaos_Schedule}" enum:"dense,sparse" help:"dense: every kind, as close as that needs (the freshness promise and the budget under the most faults); sparse: one fault every --fault-every from --fault-every in, kinds in a seeded order as many as fit, and the read SLO (p99 <= 50ms, 99.99% success) judged in the steady state between them."`
	RateUpdates float64       `field:"chaos.RateUpdates" name:"rate-updates" env:"TIDEMARK_CHAOS_RATE_UPDATES" default:"${chaos_RateUpdates}" help:"Source row updates per second (SQL transactions and API PATCHes)."`
	RateReads   float64       `field:"chaos.RateReads" name:"rate-reads" env:"TIDEMARK_CHAOS_RATE_READS" default:"${chaos_RateReads}" help:"API reads per second."`
	Cluster     bool          `field:"chaos.Cluster" name:"cluster" env:"TIDEMARK_CHAOS_CLUSTER" help:"Run a 3-master Redis Cluster (adds resharding and master kills)."`
	Kafka       string        `field:"chaos.Kafka" name:"kafka" env:"TIDEMARK_CHAOS_KAFKA" help:"Use these Kafka brokers (comma-separated) instead of an embedded broker process (no broker faults then)."`
	cli.KafkaFlags
	Keep        string        `field:"chaos.Keep" name:"keep" env:"TIDEMARK_CHAOS_KEEP" help:"Write the histories (answers, commits, violations) as JSON lines and the process logs here."`
	JSON        bool          `name:"json" help:"Print the report as JSON."`
	Bound       time.Duration `field:"chaos.Bound" name:"bound" env:"TIDEMARK_CHAOS_BOUND" default:"${chaos_Bound}" help:"The freshness promise checked on every answer."`
	Items       int           `field:"chaos.Items" name:"items" env:"TIDEMARK_CHAOS_ITEMS" default:"${chaos_Items}" help:"Items per tenant."`
	Budget      float64       `field:"chaos.SourceBudget" name:"source-budget" env:"TIDEMARK_CHAOS_SOURCE_BUDGET" default:"${chaos_SourceBudget}" help:"Foreground source reads/s given to the serve processes (background gets half, read-your-writes a quarter, inside the total of foreground and background); the cold-read burst asks for three times this."`
	Binary      string        `field:"chaos.Binary" name:"binary" env:"TIDEMARK_CHAOS_BINARY" help:"tidemark binary to run the stages with (default: this one)."`
	UpgradeFrom string        `field:"chaos.UpgradeFrom" name:"upgrade-from" env:"TIDEMARK_CHAOS_UPGRADE_FROM" help:"An older tidemark binary: every stage starts on it and is replaced by --binary one process at a time under the load and faults (a rolling upgrade; the verdict covers it)."`
	UpgradeNS   string        `field:"chaos.UpgradeNamespace" name:"upgrade-namespace" env:"TIDEMARK_CHAOS_UPGRADE_NAMESPACE" help:"Move the run to this cache namespace: a second applier group, the serve processes one at a time on the same source pool, the old namespace drained (a namespace upgrade)."`
}

func (c *chaosCmd) config() chaos.Config {
	cfg := chaos.DefaultConfig()
	cfg.Duration, cfg.Seed, cfg.FaultEvery, cfg.Schedule = c.Duration, c.Seed, c.FaultEvery, c.Schedule
	cfg.Faults = cli.SplitList(c.Faults)
	cfg.RateUpdates, cfg.RateReads = c.RateUpdates, c.RateReads
	cfg.Cluster, cfg.Kafka, cfg.KafkaConn, cfg.Keep = c.Cluster, cli.SplitList(c.Kafka), c.KafkaConn(), c.Keep
	cfg.Bound, cfg.Items, cfg.SourceBudget = c.Bound, c.Items, c.Budget
	cfg.Binary, cfg.UpgradeFrom, cfg.UpgradeNamespace = c.Binary, c.UpgradeFrom, c.UpgradeNS
	cfg.Table = c.CatalogTable()
	if cfg.Binary == "" {
		cfg.Binary, _ = tidemarkBinary() // not found: Validate says Binary is not set, Run says why
	}
	cfg.LabBinary, _ = os.Executable()
	return cfg
}

func (c *chaosCmd) Validate() error {
	var p config.Problems
	cli.ValidateAs(&p, "table", c.CatalogTable().Validate())
	cli.ValidateAs(&p, "chaos", c.config().Validate())
	return cli.FlagErrors(c, p.Err())
}

func (c *chaosCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.Binary == "" {
		if _, err := tidemarkBinary(); err != nil {
			return cli.UsageError(err)
		}
	}
	r, err := chaos.New(c.config(), chaos.Deps{Log: e.Log})
	if err != nil {
		return cli.UsageError(err)
	}
	rep, err := r.Run(ctx)
	if err != nil {
		return err
	}
	if err := cli.WriteReport(e.Stdout, rep, c.JSON); err != nil {
		return err
	}
	if !rep.Pass() && rep.Violations == 0 {
		return &cli.ExitError{Code: cli.ExitFailure, Msg: "chaos: the upgrade was not carried out: " + rep.Upgrade.Error}
	}
	if !rep.Pass() {
		return &cli.ExitError{Code: cli.ExitFailure, Msg: fmt.Sprintf("chaos: %d answers broke the freshness promise, %d seconds the source budget, %d misses the read SLO",
			rep.FreshnessViolations(), rep.ByKind[chaos.KindBudget], rep.ByKind[chaos.KindSLO])}
	}
	return nil
}
