package main

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/config"
	"tidemark/internal/lifecycle"
	"tidemark/internal/telemetry"
	"tidemark/status"
)

// processFlags are shared by the long-running commands (capture, apply,
// serve).
type processFlags struct {
	ShutdownDelay time.Duration `field:"ShutdownDelay" name:"shutdown-delay" env:"TIDEMARK_SHUTDOWN_DELAY" default:"0s" help:"On SIGTERM, fail /readyz at once and keep serving this long before the listeners close, so load balancers (a Kubernetes Service's endpoints) stop sending work first. The pod's termination grace period must cover it plus the role's flush."`
}

func (f processFlags) validate(p *config.Problems) {
	if f.ShutdownDelay < 0 {
		p.Add("ShutdownDelay", "must not be negative (got %s)", f.ShutdownDelay)
	}
}

// probes are a process's /readyz and /healthz checks.
type probes struct {
	ready []telemetry.ReadyFunc // can do its job now
	live  []telemetry.ReadyFunc // its own loops make progress
}

func ready(fs ...telemetry.ReadyFunc) []telemetry.ReadyFunc { return fs }

// runProcess runs a stand-alone process's actors g with its status page and
// telemetry endpoint (metricsAddr; empty: off) added in their phases: the
// endpoint listens before anything runs and stops last, so the whole
// shutdown is observable (lifecycle.Group has the order). Every actor is a
// service: one that returns by itself fails the process. When ctx ends,
// /readyz fails at once and the actors are stopped only after
// --shutdown-delay.
func runProcess(ctx context.Context, e *env, pf processFlags, metricsAddr string, reg prometheus.Gatherer, page *status.Page, g *lifecycle.Group, pr probes) error {
	tel, err := telemetry.NewServer(metricsAddr, reg, e.log, pr.ready...)
	if err != nil {
		return err
	}
	tel.SetLive(pr.live...)
	tel.Handle("/", page.Handler())
	g.Add(lifecycle.Observe, "status page", page.Run)
	g.Add(lifecycle.Telemetry, "telemetry", tel.Run)
	return g.RunServices(drainFirst(ctx, e, tel, pf.ShutdownDelay))
}

// drainFirst is ctx, ended delay after ctx ends; in between the process
// drains (/readyz fails, everything else still runs).
func drainFirst(ctx context.Context, e *env, tel *telemetry.Server, delay time.Duration) context.Context {
	if delay <= 0 {
		return ctx
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		tel.Drain()
		e.log.Info("draining: /readyz fails; stopping after the shutdown delay", "delay", delay)
		time.Sleep(delay)
		cancel()
	}()
	return dctx
}

// splitList splits a comma-separated flag value (--kafka), dropping empty parts.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
