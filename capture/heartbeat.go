package capture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// heartbeatPrefix is the logical message prefix capture emits and reads back.
const heartbeatPrefix = "tidemark"

// heartbeats writes a heartbeat carrying the server clock every
// cfg.Heartbeat (or Deps.HeartbeatTicks). Reading it back from the stream proves every commit before
// it in WAL was read, which is what a resolved marker promises. Failures are
// logged and retried: a missing heartbeat only holds the watermark back.
func (c *Capture) heartbeats(ctx context.Context) {
	mode := c.cfg.HeartbeatMode
	if mode == HeartbeatAuto {
		mode = HeartbeatMessage
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	ticks := c.heartbeatTicks
	if ticks == nil {
		t := time.NewTicker(c.cfg.Heartbeat)
		defer t.Stop()
		ticks = t.C
	}
	failing := false
	for {
		err := func() error {
			if conn == nil || conn.IsClosed() {
				var err error
				if conn, err = c.connect(ctx); err != nil {
					conn = nil
					return err
				}
			}
			return c.beat(ctx, conn, mode)
		}()
		var pe *pgconn.PgError
		if err != nil && mode == HeartbeatMessage && c.cfg.HeartbeatMode == HeartbeatAuto &&
			errors.As(err, &pe) && pe.Code == "42501" {
			c.log.Info("role may not emit logical messages; heartbeats update the heartbeat row instead", "table", c.cfg.HeartbeatTable)
			mode = HeartbeatRow
			err = c.beat(ctx, conn, mode)
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			c.log.Warn("heartbeat failed; the freshness watermark holds until it works again", "err", err)
			failing = true
		case err == nil && failing:
			c.log.Info("heartbeats work again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}

func (c *Capture) beat(ctx context.Context, conn *pgx.Conn, mode string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var err error
	if mode == HeartbeatRow {
		nsp, tbl, _ := splitTable(c.cfg.HeartbeatTable)
		_, err = conn.Exec(ctx, "UPDATE "+pgx.Identifier{nsp, tbl}.Sanitize()+" SET beat_at = clock_timestamp() WHERE id = 1")
	} else {
		// Non-transactional: decoded at once, in WAL order with commits.
		_, err = conn.Exec(ctx, "SELECT pg_logical_emit_message(false, '"+heartbeatPrefix+"', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text)")
	}
	if err != nil {
		return fmt.Errorf("capture: heartbeat: %w", err)
	}
	return nil
}
