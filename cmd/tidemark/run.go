package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/status"
)

// processFlags are shared by the long-running commands (capture, apply,
// serve).
type processFlags struct {
	shutdownDelay time.Duration
	trace         telemetry.TraceConfig
}

func (f *processFlags) bindProcess(b *cli.Binder) {
	f.trace = telemetry.DefaultTraceConfig()
	b.Flag(&f.shutdownDelay, "shutdown-delay", "On SIGTERM, fail /readyz at once and keep serving this long before the listeners close, so load balancers (a Kubernetes Service's endpoints) stop sending work first. The pod's termination grace period must cover it plus the role's flush.")
	b.Flag(&f.trace.Endpoint, "trace-endpoint", "OpenTelemetry collector to send sampled traces to, over OTLP/HTTP (http://collector:4318); empty: the one OTEL_EXPORTER_OTLP_ENDPOINT names, else no tracing. OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER are honoured.")
	b.Flag(&f.trace.SampleRatio, "trace-sample-ratio", "Share (0-1) of GETs and captured changes traced; a change's trace continues through Kafka into the applier.")
}

func (f *processFlags) checkProcess(p *config.Problems) {
	if f.shutdownDelay < 0 {
		p.Add("shutdownDelay", "must not be negative (got %s)", f.shutdownDelay)
	}
	p.Nested("trace", f.trace.Validate())
}

// tracing is the process's tracer provider, nil without --trace-endpoint or
// OTEL_EXPORTER_OTLP_ENDPOINT (the stages then start no span at all); its
// exporter runs in g's Telemetry phase, stopped last, so the spans of the
// shutdown are sent too.
func (f *processFlags) tracing(e *cli.Env, g *lifecycle.Group, role string, pl telemetry.Pipeline) (trace.TracerProvider, error) {
	cfg := f.trace
	cfg.Service, cfg.Pipeline = "tidemark-"+role, pl
	t, err := telemetry.NewTracing(cfg, e.Log)
	if err != nil {
		return nil, err
	}
	if !t.Enabled() {
		return nil, nil
	}
	g.Add(lifecycle.Telemetry, "tracing", t.Run)
	return t.Provider(), nil
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
func runProcess(ctx context.Context, e *cli.Env, pf processFlags, metricsAddr string, reg prometheus.Gatherer, page *status.Page, g *lifecycle.Group, pr probes) error {
	tel, err := telemetry.NewServer(metricsAddr, reg, e.Log, pr.ready...)
	if err != nil {
		return err
	}
	tel.SetLive(pr.live...)
	tel.Handle("/", page.Handler())
	g.Add(lifecycle.Observe, "status page", page.Run)
	g.Add(lifecycle.Telemetry, "telemetry", tel.Run)
	return g.RunServices(drainFirst(ctx, e, tel, pf.shutdownDelay))
}

// drainFirst is ctx, ended delay after ctx ends; in between the process
// drains (/readyz fails, everything else still runs).
func drainFirst(ctx context.Context, e *cli.Env, tel *telemetry.Server, delay time.Duration) context.Context {
	if delay <= 0 {
		return ctx
	}
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		tel.Drain()
		e.Log.Info("draining: /readyz fails; stopping after the shutdown delay", "delay", delay)
		time.Sleep(delay)
		cancel()
	}()
	return dctx
}
