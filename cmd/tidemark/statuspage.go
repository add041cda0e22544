package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/status"
)

// statusPageFlag is shared by the commands that serve the status page at /
// of --metrics-addr.
type statusPageFlag struct {
	StatusEvery time.Duration `field:"page.Every" name:"status-every" env:"TIDEMARK_STATUS_EVERY" default:"${page_Every}" help:"How often the status page at / of --metrics-addr checks freshness (it plots the last 15 minutes)."`
}

// statusTarget is what a process knows of the pipeline, from its flags.
type statusTarget struct {
	kafka, redis, pg, topic, group, namespace, slot string
	kafkaConn                                       kafkaconn.Config
	redisConn                                       cache.RedisConfig
	pool                                            string // serve's --source-pool
}

// page builds the status page of a process (a page without Kafka or Redis
// says what it cannot read); it shows the process's readiness from ready,
// the checks its /readyz asks.
func (f statusPageFlag) page(e *cli.Env, process string, t statusTarget, g prometheus.Gatherer, ready []telemetry.ReadyFunc) (*status.Page, error) {
	cfg := f.pageConfig(t)
	cfg.Process = process
	// The connection files are read again at each check (rotated secrets).
	cfg.Check.PGFile, cfg.Check.RedisConn.URLFile = e.File("pg"), e.File("redis")
	deps := status.PageDeps{Gatherer: g, Log: e.Log}
	for _, r := range ready {
		deps.Ready = append(deps.Ready, r)
	}
	return status.NewPage(cfg, deps)
}

// pageConfig is the status page's config for a process that knows t.
func (f statusPageFlag) pageConfig(t statusTarget) status.PageConfig {
	cfg := status.DefaultPageConfig()
	cfg.Every = f.StatusEvery
	c := &cfg.Check
	c.Brokers, c.Kafka, c.Redis, c.RedisConn, c.PG = cli.SplitList(t.kafka), t.kafkaConn, t.redis, t.redisConn, t.pg
	c.Topic, c.Group, c.Namespace, c.Slot, c.SourcePool = t.topic, t.group, t.namespace, t.slot, t.pool
	return cfg
}
