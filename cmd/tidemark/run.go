package main

import (
	"context"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/lifecycle"
	"tidemark/internal/telemetry"
	"tidemark/status"
)

// runProcess runs a stand-alone process's actors g with its status page and
// telemetry endpoint (metricsAddr; empty: off; /readyz asks ready) added in
// their phases: the endpoint listens before anything runs and stops last,
// so the whole shutdown is observable (lifecycle.Group has the order). Every
// actor is a service: one that returns by itself fails the process.
func runProcess(ctx context.Context, e *env, metricsAddr string, reg prometheus.Gatherer, page *status.Page, g *lifecycle.Group, ready ...telemetry.ReadyFunc) error {
	tel, err := telemetry.NewServer(metricsAddr, reg, e.log, ready...)
	if err != nil {
		return err
	}
	tel.Handle("/", page.Handler())
	g.Add(lifecycle.Observe, "status page", page.Run)
	g.Add(lifecycle.Telemetry, "telemetry", tel.Run)
	return g.RunServices(ctx)
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
