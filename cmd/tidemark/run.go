package main

import (
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/telemetry"
	"tidemark/status"
)

// stage is a pipeline process's main loop (capture, applier) that reports
// its readiness on /readyz.
type stage interface {
	Run(ctx context.Context) error
	Ready(ctx context.Context) error
}

// runStage runs s with the telemetry endpoint on metricsAddr (empty: off)
// serving reg and the status page. The endpoint starts first and lives until
// s has shut down in order; the errors of both are returned.
func runStage(ctx context.Context, e *env, metricsAddr string, reg prometheus.Gatherer, page *status.Page, s stage) error {
	srv, err := telemetry.NewServer(metricsAddr, reg, e.log, s.Ready)
	if err != nil {
		return err
	}
	srv.Handle("/", page.Handler())
	sctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	var srvErr error
	go func() { defer wg.Done(); srvErr = srv.Run(sctx) }()
	go func() { defer wg.Done(); page.Run(sctx) }()
	err = s.Run(ctx)
	stop()
	wg.Wait()
	return errors.Join(err, srvErr)
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
