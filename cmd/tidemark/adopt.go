package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/adopt"
	"github.com/tidemark/tidemark/cmd/internal/cli"
)

// adoptCmd wires flags into adopt.Config and prints what adoption did.
type adoptCmd struct {
	PG string `field:"adopt.PG" name:"pg" env:"TIDEMARK_PG" help:"Postgres connection string of the catalog database (a role that owns the table)."`
	cli.TableFlags
	Publication string `field:"adopt.Publication" name:"publication" env:"TIDEMARK_PUBLICATION" default:"${adopt_Publication}" help:"Publication capture streams."`
	Deletes     string `field:"adopt.Deletes" name:"deletes" env:"TIDEMARK_ADOPT_DELETES" default:"${adopt_Deletes}" enum:"tombstone,refuse" help:"What a DELETE on the table becomes: tombstone (an update to --deleted-state with the next version) or refuse (an error)."`
	DryRun      bool   `field:"adopt.DryRun" name:"dry-run" help:"Print the SQL adoption would run and change nothing."`
}

func (c *adoptCmd) config() adopt.Config {
	cfg := adopt.DefaultConfig()
	cfg.PG, cfg.Table, cfg.Publication, cfg.Deletes, cfg.DryRun = c.PG, c.CatalogTable(), c.Publication, c.Deletes, c.DryRun
	return cfg
}

func (c *adoptCmd) Validate() error { return cli.ValidateOne(c, "adopt", c.config().Validate()) }

// Run exits non-zero when a step is left to the operator, after printing it.
func (c *adoptCmd) Run(ctx context.Context, e *cli.Env) error {
	rep, err := adopt.Run(ctx, c.config(), e.Log.With("component", "adopt"))
	for _, s := range rep.Steps {
		mark := "ok  "
		switch {
		case s.Manual:
			mark = "TODO"
		case s.SQL != "" && c.DryRun:
			mark = "plan"
		case s.SQL != "":
			mark = "done"
		}
		fmt.Fprintf(e.Stdout, "%s  %s\n", mark, s.What)
		if s.SQL != "" && (c.DryRun || s.Manual) {
			for _, l := range strings.Split(strings.TrimSpace(s.SQL), "\n") {
				fmt.Fprintf(e.Stdout, "        %s\n", l)
			}
		}
	}
	if errors.Is(err, adopt.ErrNotAdoptable) && len(rep.Manual()) > 0 {
		return fmt.Errorf("%w: run the TODO step(s) above by hand, then run tidemark adopt again", err)
	}
	return err
}
