package capture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// errSlotGone ends a session whose slot vanished or lost WAL: the next
// session's gap check sends the reset marker.
var errSlotGone = errors.New("capture: slot is gone or lost")

// pollSlot reads pg_replication_slots into metrics every cfg.SlotPoll.
func (c *Capture) pollSlot(ctx context.Context, conn *pgx.Conn, cancel context.CancelCauseFunc) {
	t := time.NewTicker(c.cfg.SlotPoll)
	defer t.Stop()
	for {
		if err := c.slotHealth(ctx, conn); errors.Is(err, errSlotGone) {
			cancel(err)
			return
		} else if err != nil && ctx.Err() == nil {
			c.log.Debug("slot health poll failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchSlot keeps the slot gauges current whatever the stream does (a
// standby, a session retrying, a stream stuck on Kafka): they matter most
// then. It has its own connection, so it also runs while no session
// exists; the in-session poller ends a session whose slot is gone.
func (c *Capture) watchSlot(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(c.cfg.SlotPoll)
	defer t.Stop()
	for {
		c.pollLoop.Beat()
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var err error
			if conn, err = c.connect(cctx); err != nil {
				conn = nil
				c.log.Debug("slot watcher: connect", "err", err)
			}
			cancel()
		}
		if conn != nil {
			if err := c.slotHealth(ctx, conn); err != nil && !errors.Is(err, errSlotGone) && ctx.Err() == nil {
				c.log.Debug("slot watcher: poll", "err", err)
				conn.Close(context.Background())
				conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Capture) slotHealth(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var (
		lag       *int64
		walStatus *string
		safe      *int64
	)
	err := conn.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - confirmed_flush_lsn)::bigint, wal_status, safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).Scan(&lag, &walStatus, &safe)
	if errors.Is(err, pgx.ErrNoRows) {
		if c.noteWALStatus("missing") {
			c.log.Warn("replication slot disappeared")
		}
		return errSlotGone
	}
	if err != nil {
		return fmt.Errorf("capture: poll slot: %w", err)
	}
	if lag != nil {
		c.m.slotLag.Set(float64(*lag))
	}
	status := ""
	if walStatus != nil {
		status = *walStatus
	}
	changed := c.noteWALStatus(status)
	if safe != nil {
		c.m.safeWAL.Set(float64(*safe))
	} else {
		c.m.safeWAL.Set(-1)
	}
	if status == "lost" {
		if changed {
			c.log.Warn("replication slot lost required WAL")
		}
		return errSlotGone
	}
	return nil
}

// noteWALStatus sets the wal_status gauges and reports whether the status
// changed (two pollers read it: each change is logged once).
func (c *Capture) noteWALStatus(status string) bool {
	c.m.setWALStatus(status)
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := c.lastWAL != status
	c.lastWAL = status
	return changed
}
