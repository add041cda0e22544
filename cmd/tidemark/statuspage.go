package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/status"
)

// statusPageFlag is shared by the commands that serve the status page at /
// of --metrics-addr; each derives page.Check (what it knows of the
// pipeline) from its own flags.
type statusPageFlag struct {
	page status.PageConfig
}

func (f *statusPageFlag) bindPage(b *cli.Binder) {
	f.page = status.DefaultPageConfig()
	b.Flag(&f.page.Every, "status-every", "How often the status page at / of --metrics-addr checks freshness (it plots the last 15 minutes).")
}

// statusPage builds the status page of a process (a page without Kafka or
// Redis says what it cannot read); it shows the process's readiness from
// ready, the checks its /readyz asks.
func (f *statusPageFlag) statusPage(e *cli.Env, process string, g prometheus.Gatherer, ready []telemetry.ReadyFunc) (*status.Page, error) {
	cfg := f.page
	cfg.Process = process
	// The connection files are read again at each check (rotated secrets).
	cfg.Check.PGFile, cfg.Check.RedisConn.URLFile = e.File("pg"), e.File("redis")
	deps := status.PageDeps{Gatherer: g, Log: e.Log}
	for _, r := range ready {
		deps.Ready = append(deps.Ready, r)
	}
	return status.NewPage(cfg, deps)
}
