package capture

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// visibility says whether a decoded transaction is visible to new snapshots.
//
// A walsender decodes a commit once its WAL is flushed locally, but the
// committing backend leaves the running set (ProcArray) only after its
// synchronous-replication wait: with a synchronous standby that does not
// answer, the commit is decoded while every new snapshot still sees the old
// row. An invalidation sent then would be undone by a reader filling the old
// version after the floor expires (docs/design.md, "A commit is invalidated
// only once it is visible"). So the streamer holds each transaction at BEGIN
// (pgoutput proto 1 sends BEGIN only after the commit was decoded) until a
// snapshot taken after that shows its xid finished.
//
// One snapshot answers for every transaction assigned before it: a 32-bit
// xid below the snapshot's xmax and not in its running list has ended. A new
// snapshot is taken only for an xid at or above the cached xmax, or one the
// cached snapshot saw running, so a burst of decoded transactions costs one
// query.
type visibility struct {
	conn *pgx.Conn
	xmin uint64 // full (epoch-qualified) bounds of the cached snapshot
	xmax uint64
	xip  map[uint64]struct{}
	have bool
}

const snapshotSQL = `SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint,
	coalesce((SELECT array_agg(x::text::bigint) FROM pg_snapshot_xip(s) x), '{}')
	FROM pg_current_snapshot() s`

func (v *visibility) refresh(ctx context.Context) error {
	var xmin, xmax int64
	var xip []int64
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := v.conn.QueryRow(ctx, snapshotSQL).Scan(&xmin, &xmax, &xip); err != nil {
		return fmt.Errorf("capture: visibility snapshot: %w", err)
	}
	v.xmin, v.xmax, v.have = uint64(xmin), uint64(xmax), true
	v.xip = make(map[uint64]struct{}, len(xip))
	for _, x := range xip {
		v.xip[uint64(x)] = struct{}{}
	}
	return nil
}

// full widens a 32-bit xid to the epoch of the cached snapshot: a decoded
// transaction's xid is assigned before any snapshot capture takes after
// decoding it, so it lies within 2^31 below xmax.
func (v *visibility) full(xid uint32) uint64 {
	d := uint64(uint32(v.xmax) - xid) // modular distance below xmax
	if d == 0 || d > 1<<31 || d > v.xmax {
		return v.xmax // at or above xmax: newer than the snapshot
	}
	return v.xmax - d
}

// ended reports whether the cached snapshot shows xid finished (committed
// and out of the running set); false means "ask a newer snapshot".
func (v *visibility) ended(xid uint32) bool {
	if !v.have {
		return false
	}
	f := v.full(xid)
	if f >= v.xmax {
		return false
	}
	if f < v.xmin {
		return true
	}
	_, running := v.xip[f]
	return !running
}

// invisibleWarnAfter is how long a hold lasts before it is logged as a
// warning: shorter holds are a busy backend, not a stalled standby.
const invisibleWarnAfter = time.Second

// awaitVisible holds the stream (and with it every later record and
// resolved marker, so the watermark too) until xid is visible to new
// snapshots, confirming to the server meanwhile so the walsender does not
// time out.
func (s *streamer) awaitVisible(ctx context.Context, xid uint32) error {
	v := s.vis
	if v == nil || v.ended(xid) {
		return nil
	}
	// The usual wait is a committing backend that has flushed but not yet
	// left the running set: microseconds, longer only when it is not
	// scheduled. So the first retries come soon; a synchronous standby's
	// wait backs off to 250 ms, and is logged as one once it lasts.
	backoff := 200 * time.Microsecond
	var since time.Time
	warned := false
	for {
		// Holding is progress, not a stuck loop (Live): restarting would
		// not make the commit visible.
		s.c.streamLoop.Beat()
		if err := v.refresh(ctx); err != nil {
			return err
		}
		if v.ended(xid) {
			if !since.IsZero() {
				held := time.Since(since)
				s.c.m.invisible.Add(held.Seconds())
				if warned {
					s.c.log.Info("decoded commit is visible now; streaming on", "xid", xid, "held", held.Round(time.Millisecond))
				}
			}
			return nil
		}
		if since.IsZero() {
			since = time.Now()
		}
		if !warned && time.Since(since) >= invisibleWarnAfter {
			warned = true
			s.c.log.Warn("decoded commit is not yet visible to new snapshots (waiting for a synchronous standby?): holding its invalidations and the watermark until it is",
				"xid", xid, "held", time.Since(since).Round(time.Millisecond))
		}
		if time.Now().After(s.nextStatus) {
			if err := s.status(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-s.c.relay.Err():
			return err
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}
