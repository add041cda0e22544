package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/seed"
	"github.com/tidemark/tidemark/schema"
)

// FaultSyncStandbyStall: synchronous_standby_names names a standby that
// never answers, for longer than FloorTTL, under reads: every commit is
// decoded while still invisible to new snapshots.
const FaultSyncStandbyStall = "sync-standby-stall"

// ChaosFloorTTL is the FloorTTL the appliers and serve processes of a run
// use: the shortest the cache tier allows (its hard lifetime, rounded up),
// so a stall past it fits a short run.
const ChaosFloorTTL = 30 * time.Second

// absentStandby is the synchronous standby that never connects.
const absentStandby = "tidemark_chaos_absent"

// stallRows is how many items per tenant the stall's own transaction
// writes: new items of the fault's own ("stall-<run>-<n>"), which no other
// writer touches (a later write would invalidate a wrongly kept value and
// hide it) and nobody has read (a floor beside a cached value lives as long
// as the value; a value-less one only FloorTTL), read four times a second
// from just after the stall begins until a bound after it ends.
const stallRows = 10

func stallPrefix(run int) string { return "stall-" + strconv.Itoa(run) + "-" }

// stallItems are the fault's own items of one injection in tenant t, on
// the run's table; the display names the version.
func (in *injector) stallItems(run int, t string) seed.Items {
	return seed.Items{Table: in.sys.cfg.Table, Tenant: t, Prefix: stallPrefix(run), Count: stallRows,
		Display: "jsonb_build_object('tenant', t, 'item', id, 'v', v)"}
}

// syncStandbyStall makes every commit wait for a standby that does not
// exist, commits one transaction of its own over the hottest items (held
// the whole time: its commit timestamp is taken, its WAL decoded, and no
// snapshot sees it), holds past FloorTTL, and lets the commits go.
// Capture must not invalidate before a commit is visible: a floor raised
// early is gone when the commit shows, and a value filled meanwhile would
// be extended for ever.
func (in *injector) syncStandbyStall(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold+3*time.Minute)
	defer cancel()
	setting := func(on bool) error {
		conn, err := pgx.Connect(cctx, s.dsn)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		q := "ALTER SYSTEM RESET synchronous_standby_names"
		if on {
			q = "ALTER SYSTEM SET synchronous_standby_names = '" + absentStandby + "'"
		}
		if _, err := conn.Exec(cctx, q); err != nil {
			return err
		}
		_, err = conn.Exec(cctx, "SELECT pg_reload_conf()")
		return err
	}
	// Never leave the source stalled: the reset is retried while Postgres
	// restarts (ALTER SYSTEM outlives a restart, and a restart may take the
	// SET's connection after it was written).
	reset := func() error {
		var err error
		waitFor(cctx, 60*time.Second, func() bool { err = setting(false); return err == nil })
		if err != nil {
			return fmt.Errorf("reset synchronous_standby_names: %w", err)
		}
		return nil
	}
	target := fmt.Sprintf("synchronous_standby_names = '%s' (never answers), past FloorTTL %s", absentStandby, ChaosFloorTTL)
	var items []string
	run := in.intn(1 << 30)
	for i := range stallRows {
		items = append(items, stallPrefix(run)+strconv.Itoa(i))
	}
	if err := in.upsertItems(cctx, run); err != nil {
		return target, err
	}
	time.Sleep(2 * time.Second) // their first invalidations are applied, unheld
	var rwg sync.WaitGroup
	var paused atomic.Bool
	readCtx, stopReads := context.WithCancel(ctx)
	defer stopReads()
	startReads := func() {
		for _, t := range s.tenants {
			for _, it := range items {
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					for readCtx.Err() == nil {
						if !paused.Load() {
							in.load.get(readCtx, t, it, 0, false)
						}
						sleep(readCtx, 250*time.Millisecond)
					}
				}()
			}
		}
	}
	if err := setting(true); err != nil {
		return target, errors.Join(err, reset())
	}
	// The reload reaches the backends at their next command: wait until a
	// new session sees it.
	waitFor(cctx, 10*time.Second, func() bool {
		conn, err := pgx.Connect(cctx, s.dsn)
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		var v string
		return conn.QueryRow(cctx, "SHOW synchronous_standby_names").Scan(&v) == nil && v == absentStandby
	})
	type held struct {
		rows      int64
		committed time.Time // when COMMIT returned
		err       error
	}
	done := make(chan held, 1)
	begun := time.Now()
	go func() {
		var h held
		h.err = func() error {
			conn, err := pgx.Connect(cctx, s.dsn)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			// One transaction over every tenant's items.
			err = pgx.BeginFunc(cctx, conn, func(tx pgx.Tx) error {
				for _, t := range s.tenants {
					n, err := in.stallItems(run, t).Raise(cctx, tx)
					if err != nil {
						return err
					}
					h.rows += n
				}
				return nil
			})
			h.committed = time.Now()
			return err
		}()
		done <- h
	}()
	// Reads begin once an invalidation sent at once would have been
	// applied: what they fill must not outlive the commit's showing.
	// A lookup keeps a floor about to expire alive for its lease, so the
	// readers pause while it would expire, as readers of a quiet item do
	// (eviction would remove it as well), and come back before the commit
	// shows.
	sleep(ctx, 3*time.Second)
	startReads()
	sleep(ctx, 12*time.Second)
	paused.Store(true)
	sleep(ctx, ChaosFloorTTL+2*time.Second-15*time.Second)
	paused.Store(false)
	sleep(ctx, hold-ChaosFloorTTL-2*time.Second)
	err := reset()
	if err != nil {
		return target, err
	}
	select {
	case h := <-done:
		target += fmt.Sprintf("; %d rows committed, COMMIT returned after %s", h.rows, h.committed.Sub(begun).Round(100*time.Millisecond))
		if h.err != nil && !strings.Contains(h.err.Error(), "terminating connection") {
			err = fmt.Errorf("the stalled transaction: %w", h.err)
		}
	case <-time.After(30 * time.Second):
		err = errors.New("the stalled transaction's COMMIT did not return within 30s of the reset")
	}
	// A value filled while the commit was invisible and kept after it
	// showed is served stale from a bound after: keep reading until then.
	sleep(ctx, s.cfg.Bound+5*time.Second)
	stopReads()
	rwg.Wait()
	return target, err
}

// upsertItems creates the fault's own items of one injection in every
// tenant, or raises them a version, committed at once (not held by a
// stall).
func (in *injector) upsertItems(ctx context.Context, run int) error {
	conn, err := in.pgConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, t := range in.sys.tenants {
		s := in.stallItems(run, t)
		s.RaiseExisting = true
		if err := s.Insert(ctx, conn); err != nil {
			return fmt.Errorf("the fault's own items: %w", err)
		}
	}
	return nil
}

// FaultPromotion: the primary stopped under load and its streaming standby
// (pg_basebackup) promoted; every process follows the multi-host DSN
// (target_session_attrs=read-write). Postgres 15 and 16 have no failover
// slots: the slot is gone on the new primary and capture resets. Postgres
// 17+ keeps capture's failover slot on the standby (sync_replication_slots,
// synchronized_standby_slots): capture resumes with no reset. The fault
// record says which path ran. A new standby then takes the old primary's
// place, so the next promotion can run.
const FaultPromotion = "primary-promotion"

// PromotionMinRun: "all" includes the promotion only in runs at least this
// long (a standby replays beside the primary for the whole run, and the
// promotion with its refill takes a while on a shared box); name the kind
// to inject it in a shorter run.
const PromotionMinRun = 5 * time.Minute

// standbySlot is the standby's physical slot, which Postgres 17+'s
// synchronized_standby_slots names.
const standbySlot = "chaos_standby"

// resetWithin bounds the wait for capture's reset after a promotion (it
// comes within a second or two of capture reconnecting).
const resetWithin = 20 * time.Second

func (s *system) promotes() bool { return slices.Contains(s.cfg.Kinds(), FaultPromotion) }

// pgConf is the configuration of every Postgres server of a run.
func pgConf() map[string]string {
	return map[string]string{
		"track_commit_timestamp": "on",
		// Faults restart Postgres cleanly: fsync may stay off, but a
		// commit the harness saw must not be lost.
		"synchronous_commit": "on",
	}
}

// newStandby makes a streaming standby of primary in dir at port (0: any).
func (s *system) newStandby(primary *localserver.Postgres, dir string, port int) (*localserver.Postgres, error) {
	conf, slot := pgConf(), ""
	if primary.Version() >= 17 {
		conf["sync_replication_slots"], conf["hot_standby_feedback"] = "on", "on"
		slot = standbySlot
	}
	return localserver.NewStandby(primary, localserver.PostgresConfig{Dir: dir, Port: port, Ephemeral: true, Conf: conf}, slot)
}

// startStandby gives a run that may promote a streaming standby, and moves
// every connection to the multi-host DSN.
func (s *system) startStandby(ctx context.Context) error {
	if !s.promotes() {
		return nil
	}
	sb, err := s.newStandby(s.pg, filepath.Join(s.dir, "postgres-b"), 0)
	if err != nil {
		return err
	}
	s.standby = sb
	if sb.Version() >= 17 {
		if err := s.syncStandbySlots(ctx, s.pg); err != nil {
			return err
		}
	}
	s.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write", s.pg.Port, sb.Port, chaosDB)
	pcfg, err := pgxpool.ParseConfig(s.dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	s.pool.Close()
	s.pool = pool
	return nil
}

// syncStandbySlots makes primary hold logical decoding behind what the
// standby's slot confirmed (Postgres 17+), so the standby's copy of
// capture's slot never lacks what capture was sent.
func (s *system) syncStandbySlots(ctx context.Context, primary *localserver.Postgres) error {
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "ALTER SYSTEM SET synchronized_standby_slots = '"+standbySlot+"'"); err != nil {
		return fmt.Errorf("synchronized_standby_slots: %w", err)
	}
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// promotion stops the primary cleanly (its WAL reaches the standby before
// it exits), promotes the standby, says which path capture has (the slot
// kept, or gone and a reset), and builds a new standby in the old
// primary's place and port.
func (in *injector) promotion(ctx context.Context) (string, error) {
	s := in.sys
	if s.standby == nil {
		return "", errors.New("no standby: the run was started without the promotion kind, or the last one failed")
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 4*time.Minute)
	defer cancel()
	old, sb := s.pg, s.standby
	version := sb.Version()
	query := func(pg *localserver.Postgres, q string, args ...any) (bool, error) {
		conn, err := pgx.Connect(cctx, pg.DSN(chaosDB))
		if err != nil {
			return false, err
		}
		defer conn.Close(context.Background())
		var b bool
		err = conn.QueryRow(cctx, q, args...).Scan(&b)
		return b, err
	}
	if version >= 17 {
		// A synced slot stays temporary (dropped at promotion) until the
		// standby has caught up with the primary's copy.
		waitFor(cctx, 90*time.Second, func() bool {
			ok, err := query(sb, "SELECT coalesce(bool_or(synced AND NOT temporary), false) FROM pg_replication_slots WHERE slot_name = $1", s.slot)
			return err == nil && ok
		})
	}
	// Whether the standby holds capture's slot is read before the
	// promotion: after it, capture may already have created a new slot of
	// the same name on the promoted server (the reset path), which is not
	// a kept one. A synced, permanent slot survives the promotion.
	kept, err := query(sb, "SELECT count(*) > 0 FROM pg_replication_slots WHERE slot_name = $1 AND NOT temporary", s.slot)
	if err != nil {
		return fmt.Sprintf("Postgres %d", version), fmt.Errorf("read slots on the standby: %w", err)
	}
	resetBefore := in.watermarkHash(cctx)[schema.FieldResetAt]
	old.Stop()
	promoted := time.Now()
	if _, err := query(sb, "SELECT pg_promote(true, 60)"); err != nil {
		return fmt.Sprintf("Postgres %d", version), fmt.Errorf("pg_promote: %w", err)
	}
	s.pg, s.standby = sb, nil
	// What capture did: a reset moves reset_at; the failover slot path
	// must not.
	var resetAfter time.Duration
	waitFor(cctx, resetWithin, func() bool {
		if v := in.watermarkHash(cctx)[schema.FieldResetAt]; v != "" && v != resetBefore {
			resetAfter = time.Since(promoted)
			return true
		}
		return false
	})
	target := fmt.Sprintf("Postgres %d: ", version)
	switch {
	case kept && resetAfter == 0:
		target += "failover-slot path: the promoted server kept slot " + s.slot + ", no reset"
	case kept:
		target += fmt.Sprintf("failover-slot path expected (slot kept), but reset_at moved %s after the promotion", resetAfter.Round(100*time.Millisecond))
		err = errors.New(target)
	case resetAfter > 0:
		target += fmt.Sprintf("reset path: slot %s gone on the promoted server, reset_at moved %s after the promotion", s.slot, resetAfter.Round(100*time.Millisecond))
	default:
		target += "reset path: slot gone, but reset_at did not move within " + resetWithin.String()
		err = errors.New(target)
	}
	// A new standby where the old primary was.
	root, port := filepath.Dir(old.Dir), old.Port
	old.Remove()
	nsb, serr := s.newStandby(sb, root, port)
	if serr == nil && version >= 17 {
		serr = s.syncStandbySlots(cctx, sb)
	}
	if serr != nil {
		return target, errors.Join(err, fmt.Errorf("new standby: %w", serr))
	}
	s.standby = nsb
	return target, err
}
