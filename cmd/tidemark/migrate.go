package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/migrations"
)

// pgFlag is the Postgres connection shared by commands that need one.
type pgFlag struct {
	PG string `field:"PG,capture.PG,inspect.PG,page.Check.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres connection string (postgres://user@host:port/db)."`
}

// require records a missing --pg.
func (f pgFlag) require(p *config.Problems) {
	if strings.TrimSpace(f.PG) == "" {
		p.Add("PG", "is required")
	}
}

type migrateCmd struct {
	pgFlag
}

func (c *migrateCmd) Validate() error {
	var p config.Problems
	c.require(&p)
	return cli.FlagErrors(c, p.Err())
}

func (c *migrateCmd) Run(ctx context.Context, e *cli.Env) error {
	res, err := migrations.Up(ctx, c.PG, e.Log.With("component", "migrate"))
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
