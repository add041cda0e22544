package main

import (
	"context"
	"errors"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench/scanbench"
)

// benchScanCmd binds its flags into scanbench.Config (lab/bench/scanbench) and prints the report.
type benchScanCmd struct {
	scan scanbench.Config
}

func (c *benchScanCmd) Bind(b *cli.Binder) {
	c.scan = scanbench.DefaultConfig()
	b.EnvPrefix("")
	b.Flag(&c.scan.HotItems, "hot-items", "Tenant B's items, read with a zipf distribution.")
	b.Flag(&c.scan.Zipf, "zipf-s", "Zipf exponent of B's reads (> 1; larger is more skewed).")
	b.Flag(&c.scan.Clients, "clients", "Tenant B's closed-loop GET connections.")
	b.Flag(&c.scan.ColdIDs, "cold-ids", "Distinct cold ids tenant A scans, each once.")
	b.Flag(&c.scan.Scanners, "scanners", "Tenant A's GET connections.")
	b.Flag(&c.scan.ValueBytes, "value-bytes", "Padding of every item's value, bytes.")
	b.Flag(&c.scan.Serves, "serves", "tidemark serve processes.")
	b.Flag(&c.scan.ForegroundRate, "foreground-rate", "Source budget of the request path, reads/s; A scans at half of it (its fair share of two tenants).")
	b.Flag(&c.scan.FillRates, "fill-rates", "Serve's --fill-rate of each arm, fills/s per process (0: admission off).")
	b.Flag(&c.scan.Headroom, "headroom", "Bytes of redis-server's maxmemory above what B's warmed hot set uses.")
	b.Flag(&c.scan.Baseline, "baseline", "B alone before the scan.")
	b.Flag(&c.scan.After, "after", "B alone after the scan.")
	b.Flag(&c.scan.GoalDrop, "goal-drop", "Largest drop of B's hit ratio during the scan, in points, the report accepts with admission.")
}

func (c *benchScanCmd) Check() error {
	c.scan.Binary, _ = tidemarkBinary() // not found: Validate says Binary is not set
	var p config.Problems
	p.Nested("scan", c.scan.Validate())
	return p.Err()
}

func (c *benchScanCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := scanbench.Run(ctx, c.scan, scanbench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Arms) > 0 {
		err = errors.Join(err, res.WriteTable(e.Stdout))
	}
	return err
}
