package api

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/internal/pgprimary"
	"github.com/tidemark/tidemark/internal/secretfile"
)

// NewPool connects to the catalog's primary with a pool sized for cfg (unless
// the DSN sets pool_max_conns): the in-flight caps of source reads (shared,
// and read-your-writes) plus headroom for writes and key lookups, so a read
// burst never starves writes of connections. Every session also gets
// statement_timeout = Config.SourceTimeout as a server-side backstop. A server
// in recovery is refused at start and on every new connection
// (pgprimary.ErrStandby). With cfg.PGFile set, every new connection takes
// the file's current DSN (address, user, password, TLS).
func NewPool(ctx context.Context, dsn string, cfg Config) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("api: Postgres DSN: %w", err)
	}
	// An operator's pool_max_conns (a connection budget agreed with the
	// DBA or a pooler's limit) wins over the computed size.
	if !strings.Contains(dsn, "pool_max_conns") {
		pc.MaxConns = int32(cfg.MaxInFlight + max(1, cfg.MaxInFlight/4) + authLookupSlots + 16)
	}
	pc.AfterConnect = pgprimary.AfterConnect
	if cfg.PGFile != "" {
		pc.BeforeConnect = secretfile.PGBeforeConnect(cfg.PGFile)
	}
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
	// The pool connects lazily: open one connection now so a standby (or an
	// unreachable server) is refused at start, not on the first request.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("api: connect to postgres: %w", err)
	}
	conn.Release()
	return pool, nil
}
