package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
)

// apikeyCmd manages API keys; the tenant of every API request comes from its key.
type apikeyCmd struct {
	Create apikeyCreateCmd `cmd:"" help:"Create an API key for a tenant (printed once; only its SHA-256 is stored)."`
}

type apikeyCreateCmd struct {
	pgFlag
	tenant string
}

func (c *apikeyCreateCmd) Bind(b *cli.Binder) {
	c.bindPG(b)
	b.Flag(&c.tenant, "tenant", "Tenant the key acts for.")
}

func (c *apikeyCreateCmd) Check() error {
	var p config.Problems
	c.require(&p)
	if strings.TrimSpace(c.tenant) == "" {
		p.Add("tenant", "is required")
	}
	return p.Err()
}

func (c *apikeyCreateCmd) Run(ctx context.Context, e *cli.Env) error {
	conn, err := pgx.Connect(ctx, c.pg)
	if err != nil {
		return fmt.Errorf("apikey: connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	key, err := api.CreateAPIKey(ctx, conn, c.tenant)
	if err != nil {
		return err
	}
	// The key alone on the last line, so scripts can take it with tail -n1.
	fmt.Fprintf(e.Stdout, "API key for tenant %q (shown once; only its SHA-256 is stored):\n%s\n", c.tenant, key)
	return nil
}
