package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/status"
)

// serve, apply and capture run through runProcess: a stage that returns nil
// by itself there is an error exit, not a quiet exit 0.
func TestRunProcessFailsWhenAServiceStops(t *testing.T) {
	reg := telemetry.NewRegistry(telemetry.Pipeline{Namespace: "catalog", Topic: "tidemark.invalidations"})
	e := &cli.Env{Log: slog.New(slog.DiscardHandler), Stdout: io.Discard, Stderr: io.Discard}
	page, err := status.NewPage(status.DefaultPageConfig(), status.PageDeps{Gatherer: reg, Log: e.Log})
	if err != nil {
		t.Fatal(err)
	}
	var g lifecycle.Group
	g.Add(lifecycle.Requests, "api", func(context.Context) error { return nil })
	err = runProcess(context.Background(), e, processFlags{}, "", reg, page, &g, probes{})
	if !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("runProcess with a stage that returned nil = %v, want lifecycle.ErrStopped", err)
	}
}
