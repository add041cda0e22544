package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/tidemark/adopt"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
)

// adoptCmd binds its flags into adopt.Config and prints what adoption did.
type adoptCmd struct {
	adopt adopt.Config
	table catalog.Table
}

func (c *adoptCmd) Bind(b *cli.Binder) {
	c.adopt = adopt.DefaultConfig()
	a := &c.adopt
	c.table = a.Table
	b.Flag(&a.PG, "pg", "Postgres connection string of the catalog database (a role that owns the table).")
	cli.TableFlags(b, &c.table)
	b.Derive(&a.Table, &c.table)
	b.Flag(&a.Publication, "publication", "Publication capture streams.")
	b.Flag(&a.Deletes, "deletes", "What a DELETE on the table becomes: tombstone (an update to --deleted-state with the next version) or refuse (an error).").
		Env("TIDEMARK_ADOPT_DELETES").Enum("tombstone,refuse")
	b.Flag(&a.DryRun, "dry-run", "Print the SQL adoption would run and change nothing.").Env("")
}

func (c *adoptCmd) Check() error {
	var p config.Problems
	p.Nested("adopt", c.adopt.Validate())
	return p.Err()
}

// Run exits non-zero when a step is left to the operator, after printing it.
func (c *adoptCmd) Run(ctx context.Context, e *cli.Env) error {
	rep, err := adopt.Run(ctx, c.adopt, e.Log.With("component", "adopt"))
	for _, s := range rep.Steps {
		mark := "ok  "
		switch {
		case s.Manual:
			mark = "TODO"
		case s.SQL != "" && c.adopt.DryRun:
			mark = "plan"
		case s.SQL != "":
			mark = "done"
		}
		fmt.Fprintf(e.Stdout, "%s  %s\n", mark, s.What)
		if s.SQL != "" && (c.adopt.DryRun || s.Manual) {
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
