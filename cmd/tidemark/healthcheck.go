package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/tidemark/tidemark/cmd/internal/cli"
)

// healthcheckCmd is an exec probe for images without a shell or curl (the
// distroless image): exit 0 when the URL answers 2xx.
type healthcheckCmd struct {
	URL     string        `name:"url" required:"" help:"URL to GET, e.g. http://127.0.0.1:9103/readyz."`
	Timeout time.Duration `name:"timeout" default:"2s" help:"Bound on the whole request."`
}

func (c *healthcheckCmd) Run(ctx context.Context, e *cli.Env) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL, nil)
	if err != nil {
		return cli.UsageError(fmt.Errorf("--url: %w", err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitFailure, Msg: fmt.Sprintf("healthcheck: %v", err)}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return &cli.ExitError{Code: cli.ExitFailure, Msg: fmt.Sprintf("healthcheck: %s: %s %s", c.URL, resp.Status, strings.TrimSpace(string(body)))}
	}
	fmt.Fprint(e.Stdout, string(body))
	return nil
}
