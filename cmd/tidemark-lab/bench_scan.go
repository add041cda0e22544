package main

import (
	"context"
	"errors"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/lab/bench/scanbench"
)

// benchScanCmd wires flags into scanbench.Config (lab/bench/scanbench) and prints the report.
type benchScanCmd struct {
	HotItems       int           `field:"benchscan.HotItems" name:"hot-items" default:"${benchscan_HotItems}" help:"Tenant B's items, read with a zipf distribution."`
	ZipfS          float64       `field:"benchscan.Zipf" name:"zipf-s" default:"${benchscan_Zipf}" help:"Zipf exponent of B's reads (> 1; larger is more skewed)."`
	Clients        int           `field:"benchscan.Clients" name:"clients" default:"${benchscan_Clients}" help:"Tenant B's closed-loop GET connections."`
	ColdIDs        int           `field:"benchscan.ColdIDs" name:"cold-ids" default:"${benchscan_ColdIDs}" help:"Distinct cold ids tenant A scans, each once."`
	Scanners       int           `field:"benchscan.Scanners" name:"scanners" default:"${benchscan_Scanners}" help:"Tenant A's GET connections."`
	ValueBytes     int           `field:"benchscan.ValueBytes" name:"value-bytes" default:"${benchscan_ValueBytes}" help:"Padding of every item's value, bytes."`
	Serves         int           `field:"benchscan.Serves" name:"serves" default:"${benchscan_Serves}" help:"tidemark serve processes."`
	ForegroundRate float64       `field:"benchscan.ForegroundRate" name:"foreground-rate" default:"${benchscan_ForegroundRate}" help:"Source budget of the request path, reads/s; A scans at half of it (its fair share of two tenants)."`
	FillRates      []float64     `field:"benchscan.FillRates" name:"fill-rates" default:"${benchscan_FillRates}" help:"Serve's --fill-rate of each arm, fills/s per process (0: admission off)."`
	Headroom       int64         `field:"benchscan.Headroom" name:"headroom" default:"${benchscan_Headroom}" help:"Bytes of redis-server's maxmemory above what B's warmed hot set uses."`
	Baseline       time.Duration `field:"benchscan.Baseline" name:"baseline" default:"${benchscan_Baseline}" help:"B alone before the scan."`
	After          time.Duration `field:"benchscan.After" name:"after" default:"${benchscan_After}" help:"B alone after the scan."`
	GoalDrop       float64       `field:"benchscan.GoalDrop" name:"goal-drop" default:"${benchscan_GoalDrop}" help:"Largest drop of B's hit ratio during the scan, in points, the report accepts with admission."`
}

func (c *benchScanCmd) config() scanbench.Config {
	cfg := scanbench.DefaultConfig()
	cfg.Binary, _ = tidemarkBinary()
	cfg.HotItems, cfg.Zipf, cfg.Clients, cfg.ColdIDs, cfg.Scanners = c.HotItems, c.ZipfS, c.Clients, c.ColdIDs, c.Scanners
	cfg.ValueBytes, cfg.Serves, cfg.ForegroundRate, cfg.FillRates, cfg.Headroom = c.ValueBytes, c.Serves, c.ForegroundRate, c.FillRates, c.Headroom
	cfg.Baseline, cfg.After, cfg.GoalDrop = c.Baseline, c.After, c.GoalDrop
	return cfg
}

func (c *benchScanCmd) Validate() error {
	return cli.ValidateOne(c, "benchscan", c.config().Validate())
}

func (c *benchScanCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := scanbench.Run(ctx, c.config(), scanbench.Deps{Log: e.Log.With("component", "bench"), Progress: e.Stderr})
	if len(res.Arms) > 0 {
		err = errors.Join(err, res.WriteTable(e.Stdout))
	}
	return err
}
