package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"tidemark/migrations"
)

// pgFlag is the Postgres connection shared by commands that need one.
type pgFlag struct {
	PG string `field:"PG,capture.PG,inspect.PG,page.Check.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres connection string (postgres://user@host:port/db)."`
}

func (f pgFlag) problems() []string {
	if strings.TrimSpace(f.PG) == "" {
		return []string{"--pg (TIDEMARK_PG) is required"}
	}
	return nil
}

type migrateCmd struct {
	pgFlag
}

func (c *migrateCmd) Validate() error { return joinProblems(c.problems()) }

func (c *migrateCmd) Run(ctx context.Context, e *env) error {
	res, err := migrations.Up(ctx, c.PG, e.log.With("component", "migrate"))
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(e.stdout, "nothing to do: schema is at version %d\n", res.Current)
		return nil
	}
	fmt.Fprintf(e.stdout, "applied %d migration(s); schema is at version %d\n", len(res.Applied), res.Current)
	return nil
}

// joinProblems turns every problem found into one error, one per line.
func joinProblems(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "\n"))
}
