package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/migrations"
)

// pgFlag is the Postgres connection of commands that need one and hand it
// to no config of their own (migrate, apikey, serve's pool).
type pgFlag struct {
	pg string
}

func (f *pgFlag) bindPG(b *cli.Binder) {
	b.Flag(&f.pg, "pg", "Postgres connection string (postgres://user@host:port/db).")
}

// require records a missing --pg.
func (f *pgFlag) require(p *config.Problems) {
	if strings.TrimSpace(f.pg) == "" {
		p.Add("pg", "is required")
	}
}

type migrateCmd struct {
	pgFlag
}

func (c *migrateCmd) Bind(b *cli.Binder) { c.bindPG(b) }

func (c *migrateCmd) Check() error {
	var p config.Problems
	c.require(&p)
	return p.Err()
}

func (c *migrateCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := migrations.Up(ctx, c.pg, e.Log.With("component", "migrate"))
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(e.Stdout, "nothing to do: schema is at version %d\n", res.Current)
		return nil
	}
	fmt.Fprintf(e.Stdout, "applied %d migration(s); schema is at version %d\n", len(res.Applied), res.Current)
	return nil
}
