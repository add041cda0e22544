package api

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// NewPool connects to the catalog's primary with a pool sized for cfg: the
// in-flight caps of source reads (shared, and read-your-writes) plus headroom for writes and key lookups, so
// a read burst never starves writes of connections. Every session also gets
// statement_timeout = --source-timeout as a server-side backstop.
func NewPool(ctx context.Context, dsn string, cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("api: Postgres DSN: %w", err)
	}
	pc.MaxConns = int32(cfg.MaxInFlight + max(1, cfg.MaxInFlight/4) + authLookupSlots + 16)
	if pc.ConnConfig.RuntimeParams == nil {
		pc.ConnConfig.RuntimeParams = map[string]string{}
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "tidemark-serve"
	// Writes run longer than reads only by a few statements; the write
	// deadline bounds them on the client side.
	pc.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(max(cfg.SourceTimeout, cfg.WriteTimeout).Milliseconds(), 10)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("api: connect to postgres: %w", err)
	}
	return pool, nil
}
