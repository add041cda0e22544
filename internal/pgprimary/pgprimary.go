// Package pgprimary refuses a Postgres server in recovery (a hot standby) as
// the source of answers. A standby lags its primary, so a read from it can
// return a version older than one capture has already invalidated, and the
// cache would keep it; every source read must see what the primary has
// committed (docs/design.md, "Source reads").
package pgprimary

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ErrStandby is wrapped by every refusal of a server in recovery.
var ErrStandby = errors.New("the Postgres server is in recovery (a standby); tidemark reads its answers only from the primary: point the DSN at the primary, or list every host with target_session_attrs=read-write")

// Check returns an error wrapping ErrStandby when conn's server is in
// recovery, or the error of asking.
func Check(ctx context.Context, conn *pgx.Conn) error {
	var rec bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
		return fmt.Errorf("pgprimary: ask pg_is_in_recovery(): %w", err)
	}
	if rec {
		cc := conn.Config()
		return fmt.Errorf("pgprimary: %s:%d: %w", cc.Host, cc.Port, ErrStandby)
	}
	return nil
}

// AfterConnect is a pgxpool.Config.AfterConnect hook: the pool checks every
// new connection, so one opened after a failover to a standby DSN, or to a
// server demoted and restarted as a standby, is refused as at start.
func AfterConnect(ctx context.Context, conn *pgx.Conn) error { return Check(ctx, conn) }
