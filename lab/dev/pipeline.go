// Package dev runs the whole tidemark pipeline in one process: capture +
// relay, the applier, the cache tier client and the API, on servers it is
// given or starts itself (Dev.servers). `tidemark-lab dev` is this package.
package dev

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/hotset"
	"github.com/tidemark/tidemark/internal/wiring"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/replica"
	"github.com/tidemark/tidemark/status"
	"github.com/tidemark/tidemark/warm"
)

// Endpoints are the servers a pipeline talks to.
type Endpoints struct {
	PG      string   // catalog database DSN
	Redis   string   // cache tier URL (cache.ParseRedisURL)
	Brokers []string // Kafka
}

// PipelineConfig is what the stages share.
type PipelineConfig struct {
	Topic      string
	Namespace  string
	Slot       string
	Group      string
	Partitions int
	APIAddr    string
	Cache      cache.Config
	// StatusEvery is how often the status page at / of the metrics
	// address samples the pipeline.
	StatusEvery time.Duration
}

// DefaultPipelineConfig matches the stand-alone commands' defaults.
func DefaultPipelineConfig() PipelineConfig {
	return PipelineConfig{
		Topic:       promise.Topic,
		Namespace:   promise.Namespace,
		Slot:        promise.Slot,
		Group:       promise.Group,
		Partitions:  12,
		APIAddr:     "127.0.0.1:8080",
		Cache:       cache.DefaultConfig(),
		StatusEvery: status.DefaultPageConfig().Every,
	}
}

// Stages holds the configs of the pipeline's roles for these endpoints;
// startPipeline builds the roles through internal/wiring, as the
// stand-alone commands do, so `dev` and the end-to-end tests run what
// production runs.
type Stages struct {
	cfg PipelineConfig
	ep  Endpoints
	log *slog.Logger
}

// NewStages remembers the wiring; nothing connects until a stage is built.
func NewStages(cfg PipelineConfig, ep Endpoints, log *slog.Logger) *Stages {
	cfg.Cache.Namespace = cfg.Namespace
	return &Stages{cfg: cfg, ep: ep, log: log}
}

// CaptureConfig is capture's config for these endpoints.
func (s *Stages) CaptureConfig() capture.Config {
	c := capture.DefaultConfig()
	c.PG = s.ep.PG
	c.Slot = s.cfg.Slot
	c.Relay.Brokers = s.ep.Brokers
	c.Relay.Topic = s.cfg.Topic
	c.Relay.Partitions = s.cfg.Partitions
	return c
}

// ApplierConfig is the applier's config for these endpoints.
func (s *Stages) ApplierConfig() applier.Config {
	c := applier.DefaultConfig()
	c.Brokers = s.ep.Brokers
	c.Topic = s.cfg.Topic
	c.Group = s.cfg.Group
	return c
}

// Pool opens the API's Postgres pool.
func (s *Stages) Pool(ctx context.Context) (*pgxpool.Pool, error) {
	return api.NewPool(ctx, s.ep.PG, s.APIConfig())
}

// APIConfig is the API's config.
func (s *Stages) APIConfig() api.Config {
	c := api.DefaultConfig()
	c.Addr = s.cfg.APIAddr
	c.Namespace = s.cfg.Namespace
	return c
}

// ServeConfig is the serve role's, as `tidemark serve` runs it by default:
// the auditor and the warmer take part in their elections.
func (s *Stages) ServeConfig() wiring.Serve {
	a := s.APIConfig()
	c := wiring.Serve{API: a, Hot: hotset.DefaultConfig(), Audit: audit.DefaultConfig(),
		Warm: wiring.PaceWarm(warm.DefaultConfig(), a.BackgroundRate), Replica: replica.DefaultConfig(), RunAudit: true, RunWarm: true}
	c.Hot.Namespace, c.Audit.Namespace, c.Warm.Namespace, c.Replica.Namespace = s.cfg.Namespace, s.cfg.Namespace, s.cfg.Namespace, s.cfg.Namespace
	return c
}

// StatusPage builds the status page of these endpoints on the process's
// registry.
func (s *Stages) StatusPage(g prometheus.Gatherer) (*status.Page, error) {
	cfg := status.DefaultPageConfig()
	cfg.Process = "tidemark-lab dev"
	cfg.Every = s.cfg.StatusEvery
	c := &cfg.Check
	c.Brokers, c.Redis, c.PG = s.ep.Brokers, s.ep.Redis, s.ep.PG
	c.Topic, c.Group, c.Namespace, c.Slot = s.cfg.Topic, s.cfg.Group, s.cfg.Namespace, s.cfg.Slot
	return status.NewPage(cfg, status.PageDeps{Gatherer: g, Log: s.log})
}

// waitFor polls f until it returns nil or ctx ends.
func waitFor(ctx context.Context, what string, f func(context.Context) error) error {
	var last error
	for {
		if last = f(ctx); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dev: %s: %w (last error: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
