package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/chaos"
)

// chaosCmd binds its flags into chaos.Config and prints the report; exit 0
// only with zero violations.
type chaosCmd struct {
	chaos chaos.Config
	table catalog.Table
	json  bool
}

func (c *chaosCmd) Bind(b *cli.Binder) {
	c.chaos = chaos.DefaultConfig()
	k := &c.chaos
	k.Faults, c.table = []string{"all"}, k.Table
	cli.TableFlags(b, &c.table)
	b.Derive(&k.Table, &c.table)
	cli.KafkaFlags(b, &k.KafkaConn)
	b.EnvPrefix("TIDEMARK_CHAOS_")
	b.Flag(&k.Duration, "duration", "How long load and faults run (setup and the final check come on top).")
	b.Flag(&k.Seed, "seed", "Seed of the fault schedule and the load.")
	b.Flag(&k.Faults, "faults", "Fault kinds, comma-separated, or all / none. Kinds: "+strings.Join(chaos.AllFaults, ", ")+" (all includes primary-promotion only in runs of 5m or more).")
	b.Flag(&k.FaultEvery, "fault-every", "Mean spacing of faults (the dense schedule: closer when needed to fit every kind in the run; the sparse one: exactly this, at least 1m).")
	b.Flag(&k.Schedule, "schedule", "dense: every kind, as close as that needs (the freshness promise and the budget under the most faults); sparse: one fault every --fault-every from --fault-every in, kinds in a seeded order as many as fit, and the read SLO (p99 <= 50ms, 99.99% success) judged in the steady state between them.").Enum("dense,sparse")
	b.Flag(&k.RateUpdates, "rate-updates", "Source row updates per second (SQL transactions and API PATCHes).")
	b.Flag(&k.RateReads, "rate-reads", "API reads per second.")
	b.Flag(&k.Cluster, "cluster", "Run a 3-master Redis Cluster (adds resharding and master kills).")
	b.Flag(&k.Kafka, "kafka", "Use these Kafka brokers (comma-separated) instead of an embedded broker process (no broker faults then).")
	b.Flag(&k.Keep, "keep", "Write the histories (answers, commits, violations) as JSON lines and the process logs here.")
	b.Flag(&c.json, "json", "Print the report as JSON.").Env("")
	b.Flag(&k.Bound, "bound", "The freshness promise checked on every answer.")
	b.Flag(&k.Items, "items", "Items per tenant.")
	b.Flag(&k.SourceBudget, "source-budget", "Foreground source reads/s given to the serve processes (background gets half, read-your-writes a quarter, inside the total of foreground and background); the cold-read burst asks for three times this.")
	b.Flag(&k.Binary, "binary", "tidemark binary to run the stages with (default: the tidemark beside this binary, else on PATH).")
	b.Flag(&k.UpgradeFrom, "upgrade-from", "An older tidemark binary: every stage starts on it and is replaced by --binary one process at a time under the load and faults (a rolling upgrade; the verdict covers it).")
	b.Flag(&k.UpgradeNamespace, "upgrade-namespace", "Move the run to this cache namespace: a second applier group, the serve processes one at a time on the same source pool, the old namespace drained (a namespace upgrade).")
}

// config is chaos.Config with the binaries found.
func (c *chaosCmd) config() chaos.Config {
	cfg := c.chaos
	if cfg.Binary == "" {
		cfg.Binary, _ = tidemarkBinary() // not found: Validate says Binary is not set, Run says why
	}
	cfg.LabBinary, _ = os.Executable()
	return cfg
}

func (c *chaosCmd) Check() error {
	var p config.Problems
	p.Nested("table", c.table.Validate())
	p.Nested("chaos", c.config().Validate())
	return p.Err()
}

func (c *chaosCmd) Run(ctx context.Context, e *cli.Env) error {
	if c.chaos.Binary == "" {
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
	if err := cli.WriteReport(e.Stdout, rep, c.json); err != nil {
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
