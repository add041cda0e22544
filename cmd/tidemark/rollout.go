package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/cmd/internal/cli"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/rollout"
	"github.com/tidemark/tidemark/schema"
)

// rolloutCmd sets and shows the tenants' serving modes (package rollout);
// every serve process of the source pool follows a change within its
// --rollout-poll.
type rolloutCmd struct {
	Set    rolloutSetCmd    `cmd:"" help:"Set a tenant's (or every tenant's) serving mode: source (the rollback), shadow, or cache with --ramp percent."`
	Status rolloutStatusCmd `cmd:"" help:"Show each tenant's mode, ramp, halt and shadow comparison figures."`
}

type rolloutStore struct {
	pgFlag
	Redis string `field:"Redis,redis.URL" name:"redis" env:"TIDEMARK_REDIS" help:"Cache tier URL."`
	cli.RedisFlags
	Pool      string `name:"source-pool" env:"TIDEMARK_SOURCE_POOL" help:"The serve processes' --source-pool (default: the pool --namespace's identity record names, else serve's default)."`
	Namespace string `name:"namespace" env:"TIDEMARK_NAMESPACE" default:"${api_Namespace}" help:"The serve processes' --namespace: its identity record must name --source-pool, or nothing is changed."`
}

// open is the store of the namespace's pool, recording in Postgres: the
// settings' record there is what a serve process puts back when the cache
// tier loses its copy.
func (r *rolloutStore) open(e *cli.Env) (*rollout.Store, func(), error) {
	rdb, err := cache.OpenRedis(r.RedisConn(r.Redis), e.Log)
	if err != nil {
		return nil, nil, cli.UsageError(err)
	}
	// The namespace's serve processes claimed their pool in its identity
	// record: settings written to another pool would change nothing they
	// serve (and might change another deployment's).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bound, err := rdb.HGet(ctx, schema.IdentityKey(r.Namespace), schema.FieldIdentityPool).Result()
	switch {
	case errors.Is(err, redis.Nil):
		if r.Pool == "" {
			r.Pool = api.DefaultConfig().SourcePool
		}
	case err != nil:
		rdb.Close()
		return nil, nil, fmt.Errorf("rollout: read namespace %s's identity: %w", r.Namespace, err)
	case r.Pool == "":
		r.Pool = bound
	case bound != r.Pool:
		rdb.Close()
		return nil, nil, cli.UsageError(fmt.Errorf("namespace %q is served on source pool %q, but --source-pool is %q: give --source-pool %s (or TIDEMARK_SOURCE_POOL, as serve reads it)",
			r.Namespace, bound, r.Pool, bound))
	}
	conn, err := pgx.Connect(ctx, r.PG)
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("rollout: connect to Postgres: %w", err)
	}
	return rollout.NewStore(rdb, r.Pool).WithDB(conn), func() { conn.Close(context.Background()); rdb.Close() }, nil
}

type rolloutSetCmd struct {
	rolloutStore
	Mode   string  `arg:"" enum:"source,shadow,cache" help:"source, shadow or cache."`
	Tenant string  `field:"Tenant" name:"tenant" help:"The tenant."`
	All    bool    `name:"all" help:"Every tenant without a setting of its own."`
	Ramp   float64 `field:"Ramp" name:"ramp" default:"100" help:"With cache: percent of the tenant's items read through the cache (the rest from the source), 0-100."`
	Force  bool    `name:"force" help:"Raise a ramp that shadow mismatches halted."`
}

func (c *rolloutSetCmd) Validate() error {
	var p config.Problems
	c.require(&p)
	if c.Redis == "" {
		p.Add("Redis", "is required")
	}
	c.ValidateRedis(&p, c.Redis)
	if (c.Tenant == "") == !c.All {
		p.Add("Tenant", "give exactly one of a tenant and --all")
	}
	if !(c.Ramp >= 0 && c.Ramp <= 100) {
		p.Add("Ramp", "must be between 0 and 100 (got %v)", c.Ramp)
	}
	return cli.FlagErrors(c, p.Err())
}

func (c *rolloutStatusCmd) Validate() error {
	var p config.Problems
	c.require(&p)
	if c.Redis == "" {
		p.Add("Redis", "is required")
	}
	c.ValidateRedis(&p, c.Redis)
	return cli.FlagErrors(c, p.Err())
}

func (c *rolloutSetCmd) Run(ctx context.Context, e *cli.Env) error {
	st, closeFn, err := c.open(e)
	if err != nil {
		return err
	}
	defer closeFn()
	mode, err := rollout.ParseMode(c.Mode)
	if err != nil {
		return cli.UsageError(err)
	}
	tenant := c.Tenant
	if c.All {
		tenant = rollout.AllTenants
	}
	set, err := st.Set(ctx, tenant, mode, c.Ramp, c.Force, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "%s: %s (every serve process follows within its --rollout-poll)\n", tenant, set)
	return nil
}

type rolloutStatusCmd struct {
	rolloutStore
	JSON bool `name:"json" help:"Print JSON."`
}

func (c *rolloutStatusCmd) Run(ctx context.Context, e *cli.Env) error {
	st, closeFn, err := c.open(e)
	if err != nil {
		return err
	}
	defer closeFn()
	rep, err := st.Report(ctx)
	if err != nil {
		return &cli.ExitError{Code: cli.ExitUnreadable, Msg: err.Error()}
	}
	all := rep.Tenants
	if c.JSON {
		enc := json.NewEncoder(e.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	for _, note := range []string{rep.Problem, rep.Restored} {
		if note != "" {
			fmt.Fprintln(e.Stdout, note)
		}
	}
	if len(all) == 0 {
		fmt.Fprintln(e.Stdout, "no rollout settings: every tenant is served through the cache (100 %) unless serve's --rollout-default says otherwise")
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tMODE\tSHADOW (this step)")
	for _, t := range all {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Tenant, t.Setting, t.Shadow)
	}
	return tw.Flush()
}
