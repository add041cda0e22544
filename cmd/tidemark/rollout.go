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
	redis     cache.RedisConfig
	pool      string
	namespace string
}

func (r *rolloutStore) bindStore(b *cli.Binder) {
	r.redis, r.namespace = cache.DefaultRedisConfig(), api.DefaultConfig().Namespace
	r.bindPG(b)
	cli.RedisFlags(b, &r.redis, "Cache tier URL.")
	b.Flag(&r.pool, "source-pool", "The serve processes' --source-pool (default: the pool --namespace's identity record names, else serve's default).")
	b.Flag(&r.namespace, "namespace", "The serve processes' --namespace: its identity record must name --source-pool, or nothing is changed.")
}

// checkStore records a missing --pg or a missing or wrong --redis.
func (r *rolloutStore) checkStore(p *config.Problems) {
	r.require(p)
	if r.redis.URL == "" {
		p.Add("redis.URL", "is required")
	}
	cli.CheckRedis(p, r.redis)
}

// open is the store of the namespace's pool, recording in Postgres: the
// settings' record there is what a serve process puts back when the cache
// tier loses its copy.
func (r *rolloutStore) open(e *cli.Env) (*rollout.Store, func(), error) {
	rdb, err := cache.OpenRedis(r.redis, e.Log)
	if err != nil {
		return nil, nil, cli.UsageError(err)
	}
	// The namespace's serve processes claimed their pool in its identity
	// record: settings written to another pool would change nothing they
	// serve (and might change another deployment's).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bound, err := rdb.HGet(ctx, schema.IdentityKey(r.namespace), schema.FieldIdentityPool).Result()
	switch {
	case errors.Is(err, redis.Nil):
		if r.pool == "" {
			r.pool = api.DefaultConfig().SourcePool
		}
	case err != nil:
		rdb.Close()
		return nil, nil, fmt.Errorf("rollout: read namespace %s's identity: %w", r.namespace, err)
	case r.pool == "":
		r.pool = bound
	case bound != r.pool:
		rdb.Close()
		return nil, nil, cli.UsageError(fmt.Errorf("namespace %q is served on source pool %q, but --source-pool is %q: give --source-pool %s (or TIDEMARK_SOURCE_POOL, as serve reads it)",
			r.namespace, bound, r.pool, bound))
	}
	conn, err := pgx.Connect(ctx, r.pg)
	if err != nil {
		rdb.Close()
		return nil, nil, fmt.Errorf("rollout: connect to Postgres: %w", err)
	}
	return rollout.NewStore(rdb, r.pool).WithDB(conn), func() { conn.Close(context.Background()); rdb.Close() }, nil
}

type rolloutSetCmd struct {
	rolloutStore
	Mode   string `arg:"" enum:"source,shadow,cache" help:"source, shadow or cache."`
	tenant string
	all    bool
	ramp   float64
	force  bool
}

func (c *rolloutSetCmd) Bind(b *cli.Binder) {
	c.bindStore(b)
	c.ramp = 100
	b.EnvPrefix("")
	b.Flag(&c.tenant, "tenant", "The tenant.")
	b.Flag(&c.all, "all", "Every tenant without a setting of its own.")
	b.Flag(&c.ramp, "ramp", "With cache: percent of the tenant's items read through the cache (the rest from the source), 0-100.")
	b.Flag(&c.force, "force", "Raise a ramp that shadow mismatches halted.")
}

func (c *rolloutSetCmd) Check() error {
	var p config.Problems
	c.checkStore(&p)
	if (c.tenant == "") == !c.all {
		p.Add("tenant", "give exactly one of a tenant and --all")
	}
	if !(c.ramp >= 0 && c.ramp <= 100) {
		p.Add("ramp", "must be between 0 and 100 (got %v)", c.ramp)
	}
	return p.Err()
}

func (c *rolloutStatusCmd) Bind(b *cli.Binder) {
	c.bindStore(b)
	b.Flag(&c.json, "json", "Print JSON.").Env("")
}

func (c *rolloutStatusCmd) Check() error {
	var p config.Problems
	c.checkStore(&p)
	return p.Err()
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
	tenant := c.tenant
	if c.all {
		tenant = rollout.AllTenants
	}
	set, err := st.Set(ctx, tenant, mode, c.ramp, c.force, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "%s: %s (every serve process follows within its --rollout-poll)\n", tenant, set)
	return nil
}

type rolloutStatusCmd struct {
	rolloutStore
	json bool
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
	if c.json {
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
