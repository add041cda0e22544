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
		c.m.setWALStatus("missing")
		c.log.Warn("replication slot disappeared")
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
	c.m.setWALStatus(status)
	if safe != nil {
		c.m.safeWAL.Set(float64(*safe))
	} else {
		c.m.safeWAL.Set(-1)
	}
	if status == "lost" {
		c.log.Warn("replication slot lost required WAL")
		return errSlotGone
	}
	return nil
}
