package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
func (c *Capture) heartbeats(ctx context.Context, pub *publicationWatch) {
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
			// The publication first: no beat vouches for a stream the
			// publication has stopped carrying every change of.
			if err := c.watchPublication(ctx, conn, pub); err != nil {
				return err
			}
			return c.beat(ctx, conn, mode)
		}()
		if errors.Is(err, errPublicationChanged) {
			pub.stop(err)
			return
		}
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

// errPublicationChanged ends a session whose publication or table changed
// under it (after the reset marker is in Kafka): the next one checks the
// publication again before it streams.
var errPublicationChanged = errors.New("capture: the publication or the table's definition changed while streaming")

// publicationWatch is what a session's heartbeats check the source against
// before every beat: the fingerprints (publicationSQL, tableSQL) as the
// session's preflight found them valid.
type publicationWatch struct {
	fp         fingerprints
	partitions int
	stop       context.CancelCauseFunc // ends the session
}

// watchPublication reads the fingerprints before a beat. The publication
// changed (the table dropped from it, or dropped and added again, its
// columns or options changed), the changes made since may never have been
// streamed; the table's definition changed (a rewrite, a column, an enum
// label, a partition), values changed with no change streamed at all.
// Either way heartbeats would vouch for the values replaced: a reset
// marker goes to every partition at once, timed after the change, and the
// error ends the session, whose successor checks the publication before it
// streams (and stops if it no longer publishes every change). The reset is
// recorded as pending first, so a crash before it is in Kafka sends it at
// the next start.
func (c *Capture) watchPublication(ctx context.Context, conn *pgx.Conn, pub *publicationWatch) error {
	fp, err := readFingerprints(ctx, conn, c.cfg.Publication, c.cfg.Table)
	if err != nil || fp == pub.fp {
		return err
	}
	var reasons []string
	if fp.publication != pub.fp.publication {
		reasons = append(reasons, ReasonPublicationChanged)
		c.log.Error("the publication changed while streaming: changes made since may not have been streamed; sending a reset marker", "publication", c.cfg.Publication, "table", c.cfg.Table)
	}
	if fp.table != pub.fp.table {
		reasons = append(reasons, ReasonTableChanged)
		c.log.Error("the table's definition changed while streaming (a rewrite, a column, an enum label, a partition): its values may have changed with no change streamed; sending a reset marker", "table", c.cfg.Table)
	}
	pending := c.saved
	pending.PendingReset = strings.Join(reasons, ",")
	if err := c.relay.SaveState(ctx, c.cfg.Slot, pending); err != nil {
		return err
	}
	if err := c.awaitCommittedVisible(ctx, conn); err != nil {
		return err
	}
	var at time.Time
	if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
		return fmt.Errorf("capture: read the server clock for the reset marker: %w", err)
	}
	if err := c.reset(ctx, at, pub.partitions, reasons); err != nil {
		return err
	}
	now := c.saved
	now.Publication, now.Table = fp.publication, fp.table
	if err := c.relay.SaveState(ctx, c.cfg.Slot, now); err != nil {
		return err
	}
	return errPublicationChanged
}
