package main

import (
	"context"
	"time"

	"tidemark/inspect"
)

type inspectCmd struct {
	PG        string        `name:"pg" env:"TIDEMARK_PG" help:"Postgres DSN of the catalog (the source of truth)."`
	Redis     string        `name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier URL."`
	Namespace string        `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"catalog" help:"Cache-tier key namespace."`
	Sample    int           `name:"sample" env:"TIDEMARK_INSPECT_SAMPLE" default:"1000" help:"Cached entries to check."`
	Tenant    string        `name:"tenant" env:"TIDEMARK_INSPECT_TENANT" help:"Only check this tenant's entries."`
	SLO       time.Duration `name:"slo" env:"TIDEMARK_SLO" default:"30s" help:"Freshness SLO."`
	Table     string        `name:"table" env:"TIDEMARK_TABLE" default:"catalog.items" help:"Catalog table (tenant_id, item_id, version, state, updated_at)."`
	JSON      bool          `name:"json" help:"Print the report as JSON."`
}

func (c *inspectCmd) config() inspect.Config {
	return inspect.Config{Redis: c.Redis, PG: c.PG, Namespace: c.Namespace, Sample: c.Sample, Tenant: c.Tenant,
		SLO: c.SLO, Table: c.Table}
}

func (c *inspectCmd) Validate() error { return c.config().Validate() }

// Run exits 1 when an entry would be served while older than the SLO, 2 when
// it could not read.
func (c *inspectCmd) Run(ctx context.Context, e *env) error {
	rep, err := inspect.Run(ctx, c.config(), e.log)
	if err != nil {
		return &exitError{code: exitUnreadable, msg: "inspect: " + err.Error()}
	}
	if c.JSON {
		err = rep.WriteJSON(e.stdout)
	} else {
		err = rep.WriteText(e.stdout)
	}
	if err != nil {
		return err
	}
	if rep.Violations > 0 {
		return &exitError{code: exitFailure, msg: "inspect: entries would be served while older than the SLO"}
	}
	return nil
}
