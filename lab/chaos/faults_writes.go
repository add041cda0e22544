package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// FaultUnbumpedWrite: writes that change items' payload without a new
	// version, as real databases make them: under session_replication_role
	// = replica (pg_restore, ETL loaders, logical replication's apply
	// workers), and through a BEFORE UPDATE trigger that sorts after the
	// version trigger. Each payload gets a marker; the checker holds every
	// answer at that version sent past the bound after the write to carry
	// it (KindStale). It fails with the rule "a change is an invalidation
	// whatever its version says" reverted (cache/scripts/invalidate.lua):
	// the hot entry read before the write stays vouched for by W.
	FaultUnbumpedWrite = "unbumped-write"
	// FaultBadVersionRow: rows capture cannot turn into events (a NULL
	// version, an empty tenant) with the table's constraints dropped for
	// the fault, as after a restore without them. Capture must stream on:
	// a canary change written after them must reach the cache tier within
	// the bound, or the run fails (KindPipelineStopped).
	FaultBadVersionRow = "bad-version-row"
)

// unbumpedItems per tenant, of the fault's own; unbumpedRuns numbers them
// within a run.
const unbumpedItems = 6

var unbumpedRuns atomic.Int64

// badRows numbers bad-version-row's own items within a run.
var badRows atomic.Int64

// canaryWaitAmongFaults is how long bad-version-row waits for the watermark
// to pass its canary when other kinds run too: past long-outage's longest
// hold (captures stopped) with the bound to catch up.
const canaryWaitAmongFaults = 90 * time.Second

// unbumpedTrigger is the later-sorting trigger: it writes the marker set in
// the session (chaos.unbumped) into the payload, with the row's final
// version as the payload's own (the version trigger ran before it).
const unbumpedTrigger = `CREATE OR REPLACE FUNCTION chaos.unbumped() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('chaos.unbumped', true), '') <> '' THEN
    NEW.%[1]s := NEW.%[1]s || jsonb_build_object('unbumped', current_setting('chaos.unbumped')::bigint, 'v', NEW.%[2]s);
  END IF;
  RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER zzzzzz_chaos_unbumped BEFORE UPDATE ON %[3]s FOR EACH ROW EXECUTE FUNCTION chaos.unbumped();`

// unbumpedWrite rewrites hot items' payloads both ways, records each write
// for the checker, and reads the items for hold (past the bound).
func (in *injector) unbumpedWrite(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	t := s.cfg.Table
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	payload, ver := col(t.Payload[0]), col(t.VersionColumn)
	if _, err := conn.Exec(cctx, fmt.Sprintf(unbumpedTrigger, payload, ver, t.Qualified())); err != nil {
		return "", fmt.Errorf("create the later-sorting trigger: %w", err)
	}
	// Does a version trigger fire under replica role (adopt's, ENABLE
	// ALWAYS)? Then the replica-role write gets a version, and the
	// harness's history trigger (which does not fire) is written by hand.
	var always bool
	if err := conn.QueryRow(cctx, `SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = $1::regclass AND tgenabled = 'A' AND NOT tgisinternal)`,
		t.Qualified()).Scan(&always); err != nil {
		return "", err
	}
	where := fmt.Sprintf("%s = $1 AND %s = $2 AND %s = %s", col(t.TenantColumn), col(t.ItemColumn), col(t.StateColumn), litActive(t.ActiveState))
	// Items of the fault's own, which no writer touches: a new version from
	// the load would replace the rewritten one and hide the hole.
	n := unbumpedRuns.Add(1)
	var items []itemKey
	for _, tenant := range s.tenants {
		for i := range unbumpedItems {
			k := itemKey{tenant, fmt.Sprintf("unbumped-%d-%d", n, i)}
			if _, err := conn.Exec(cctx, fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s, %s) VALUES ($1, $2, 1, %s, jsonb_build_object('tenant', $1::text, 'item', $2::text, 'v', 1))",
				t.Qualified(), col(t.TenantColumn), col(t.ItemColumn), ver, col(t.StateColumn), payload, litActive(t.ActiveState)), k.tenant, k.item); err != nil {
				return "", fmt.Errorf("insert the fault's items: %w", err)
			}
			items = append(items, k)
		}
	}
	// The inserts' invalidations arrive; then the items are cached.
	sleep(ctx, 2*time.Second)
	cached := in.cacheAll(cctx, items)
	var done []Unbumped
	var kinds []string
	for i, k := range items {
		tenant, item := k.tenant, k.item
		marker := time.Now().UnixNano()
		replica := i%2 == 0
		tx, err := conn.Begin(cctx)
		if err != nil {
			return "", err
		}
		var v int64
		if replica {
			bump := "0"
			if always {
				bump = "1"
			}
			_, err = tx.Exec(cctx, "SET LOCAL session_replication_role = replica")
			if err == nil {
				err = tx.QueryRow(cctx, fmt.Sprintf("UPDATE %s SET %s = %s || jsonb_build_object('unbumped', $3::bigint, 'v', %s + %s) WHERE %s RETURNING %s",
					t.Qualified(), payload, payload, ver, bump, where, ver), tenant, item, marker).Scan(&v)
			}
			if err == nil && always {
				_, err = tx.Exec(cctx, `INSERT INTO chaos.history (tenant_id, item_id, version, state) VALUES ($1, $2, $3, 'active')`, tenant, item, v)
			}
		} else {
			_, err = tx.Exec(cctx, "SELECT set_config('chaos.unbumped', $1, true)", strconv.FormatInt(marker, 10))
			if err == nil {
				err = tx.QueryRow(cctx, fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s RETURNING %s", t.Qualified(), ver, ver, where, ver), tenant, item).Scan(&v)
			}
		}
		if err == nil {
			err = tx.Commit(cctx)
		}
		if err != nil {
			tx.Rollback(context.Background())
			if errors.Is(err, pgx.ErrNoRows) {
				continue // deleted meanwhile
			}
			return "", fmt.Errorf("unbumped write: %w", err)
		}
		u := Unbumped{Tenant: tenant, Item: item, Version: v, Marker: marker, VisibleBy: time.Now()}
		in.load.rec.addUnbumped(u)
		done = append(done, u)
		kinds = append(kinds, map[bool]string{true: "replica-role", false: "later-trigger"}[replica])
	}
	read := make([]itemKey, 0, len(done))
	changed := make([]time.Time, 0, len(done))
	for _, u := range done {
		read = append(read, itemKey{u.Tenant, u.Item})
		changed = append(changed, u.VisibleBy)
	}
	start := time.Now()
	left := in.readPastBound(ctx, read, changed, hold)
	what := fmt.Sprintf("%d payloads rewritten without a new version on %s (%s; %d of %d items answered from the cache before), read for %s",
		len(done), t.Name, summarise(kinds), cached, len(items), time.Since(start).Round(time.Second))
	switch {
	case left > 0 && ctx.Err() == nil:
		what += fmt.Sprintf("; %d of them %s when the reads stopped at their cap (hold %s + %s)",
			left, neverJudged, hold.Round(time.Second), readPast)
	case left > 0:
		what += fmt.Sprintf("; %d of them %s before the run ended", left, neverJudged)
	}
	return what, nil
}

// readPast is how long a fault that changes values keeps reading its
// items past its hold for a hit past the bound.
const readPast = 60 * time.Second

// readPastBound reads items, each changed at changed[i], on every serve
// process, for hold and then until each was answered from the cache past
// the bound after its change, the run ends or the reads reach hold +
// readPast: on a busy box the pipeline may lag, and a value the watermark
// does not vouch for is refreshed, not served; an old value is only judged
// once a hit past the bound was asked for. The cap keeps an item that
// never turns into a hit from holding the fault to the run's end; every
// read made is recorded, and judged, all the same. It returns how many
// items were never answered from the cache past the bound.
func (in *injector) readPastBound(ctx context.Context, items []itemKey, changed []time.Time, hold time.Duration) int {
	start := time.Now()
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), hold+readPast)
	defer rcancel()
	bound := in.load.rec.checker.Bound
	judged := make([]bool, len(items))
	left := len(items)
	for (time.Since(start) < hold || left > 0) && ctx.Err() == nil && rctx.Err() == nil {
		for i, k := range items {
			a, ok := in.load.getOn(rctx, i%len(in.sys.serves), k.tenant, k.item, 0, false)
			if ok && !judged[i] && a.Status == http.StatusOK && hit(a.CacheStatus) && a.Sent.After(changed[i].Add(bound)) {
				judged[i] = true
				left--
			}
		}
		sleep(ctx, 500*time.Millisecond)
	}
	return left
}

// neverJudged is what the unbumped-write fault says of items it could not
// read from the cache past the bound (the run judged nothing of them).
const neverJudged = "never answered from the cache past the bound"

// cacheAllWithin bounds cacheAll's reads.
const cacheAllWithin = 45 * time.Second

// cacheAll reads each item until a serve process answers it from the cache
// (or cacheAllWithin passes) and returns how many were: on a busy box a first read
// may be refused (503) while the source is slow, and a fault whose items
// were never cached proves nothing.
func (in *injector) cacheAll(ctx context.Context, items []itemKey) int {
	cached := make([]bool, len(items))
	n := 0
	deadline := time.Now().Add(cacheAllWithin)
	for n < len(items) && time.Now().Before(deadline) && ctx.Err() == nil {
		for i, k := range items {
			if cached[i] {
				continue
			}
			if a, ok := in.load.getOn(ctx, i%len(in.sys.serves), k.tenant, k.item, 0, false); ok && a.Status == http.StatusOK && hit(a.CacheStatus) {
				cached[i] = true
				n++
			}
		}
		if n < len(items) {
			sleep(ctx, 200*time.Millisecond)
		}
	}
	return n
}

func summarise(kinds []string) string {
	n := map[string]int{}
	for _, k := range kinds {
		n[k]++
	}
	var out []string
	for _, k := range []string{"replica-role", "later-trigger"} {
		out = append(out, fmt.Sprintf("%d %s", n[k], k))
	}
	return strings.Join(out, ", ")
}

func litActive(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// badVersionRow drops the version column's constraints, writes a NULL
// version into a hot item and a row with an empty tenant (both under
// replica role: the harness's history trigger would refuse a NULL), then a
// canary change of another item, which must reach the cache tier (its floor)
// within the bound; then puts the rows and the constraints back.
func (in *injector) badVersionRow(ctx context.Context) (string, error) {
	s := in.sys
	t := s.cfg.Table
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), canaryWaitAmongFaults+time.Minute)
	defer cancel()
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	ver, payload := col(t.VersionColumn), col(t.Payload[0])
	type constraint struct{ name, def string }
	var checks []constraint
	rows, err := conn.Query(cctx, `SELECT conname::text, pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conrelid = $1::regclass AND contype = 'c' AND pg_get_constraintdef(oid) LIKE '%' || $2 || '%'`, t.Qualified(), t.VersionColumn)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var c constraint
		if err := rows.Scan(&c.name, &c.def); err != nil {
			rows.Close()
			return "", err
		}
		checks = append(checks, c)
	}
	if err := rows.Err(); err != nil {
		return "", err
	}
	ddl := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", t.Qualified(), ver)
	for _, c := range checks {
		ddl += fmt.Sprintf(", DROP CONSTRAINT %s", col(c.name))
	}
	if _, err := conn.Exec(cctx, ddl); err != nil {
		return "", fmt.Errorf("drop the version constraints: %w", err)
	}
	// Dropped and added again: the put-back below may run twice when a
	// Postgres restart takes its reply.
	restore := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", t.Qualified(), ver)
	for _, c := range checks {
		restore += fmt.Sprintf(", DROP CONSTRAINT IF EXISTS %s, ADD CONSTRAINT %s %s", col(c.name), col(c.name), c.def)
	}
	// A version trigger that fires under replica role (adopt's) would give
	// the NULL a version: it is disabled in the bad rows' transaction only.
	var always []string
	arows, err := conn.Query(cctx, `SELECT tgname::text FROM pg_trigger WHERE tgrelid = $1::regclass AND tgenabled = 'A' AND NOT tgisinternal`, t.Qualified())
	if err != nil {
		return "", err
	}
	for arows.Next() {
		var n string
		if err := arows.Scan(&n); err != nil {
			arows.Close()
			return "", err
		}
		always = append(always, n)
	}
	if err := arows.Err(); err != nil {
		return "", err
	}
	tenant := s.tenants[in.intn(len(s.tenants))]
	where := fmt.Sprintf("%s = $1 AND %s = $2 AND %s = %s", col(t.TenantColumn), col(t.ItemColumn), col(t.StateColumn), litActive(t.ActiveState))
	// The bad row is an item of the fault's own, inserted (and read into
	// the cache) first: a load writer updating a row whose version is NULL
	// would write a payload the checker cannot match with its version.
	bad := fmt.Sprintf("badrow-%d", badRows.Add(1))
	var old int64 // the bad item's version before the NULL
	// putBack gives the bad item a version again (as the writers would
	// raise it, the history trigger firing), removes the empty-tenant row
	// and restores the constraints, on a new connection each try: a
	// Postgres restart among the faults must not leave the NULL behind (the
	// TRUNCATE fault's copy into the history refuses it). Each step can run
	// twice.
	putBack := func() error {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err := in.onNewConn(pctx, time.Minute, func(c *pgx.Conn) error {
			if _, err := c.Exec(pctx, fmt.Sprintf("UPDATE %s SET %s = %d, %s = jsonb_build_object('tenant', %s, 'item', %s, 'v', %d) WHERE %s AND %s IS NULL",
				t.Qualified(), ver, old+1, payload, col(t.TenantColumn), col(t.ItemColumn), old+1, where, ver), tenant, bad); err != nil {
				return err
			}
			if _, err := c.Exec(pctx, fmt.Sprintf("BEGIN; SET LOCAL session_replication_role = replica; DELETE FROM %s WHERE %s = ''; COMMIT", t.Qualified(), col(t.TenantColumn))); err != nil {
				return err
			}
			_, err := c.Exec(pctx, restore)
			return err
		})
		if err != nil {
			return fmt.Errorf("put the row and the version constraints back: %w", err)
		}
		return nil
	}
	if _, err := conn.Exec(cctx, fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s, %s) VALUES ($1, $2, 1, %s, jsonb_build_object('tenant', $1::text, 'item', $2::text, 'v', 1))",
		t.Qualified(), col(t.TenantColumn), col(t.ItemColumn), ver, col(t.StateColumn), payload, litActive(t.ActiveState)), tenant, bad); err != nil {
		return "", errors.Join(fmt.Errorf("insert the fault's item: %w", err), putBack())
	}
	sleep(ctx, 2*time.Second)
	in.load.getOn(cctx, in.intn(len(s.serves)), tenant, bad, 0, false)
	{ // one transaction: the NULL version and the empty-tenant row
		tx, err := conn.Begin(cctx)
		if err != nil {
			return "", err
		}
		_, err = tx.Exec(cctx, "SET LOCAL session_replication_role = replica")
		for _, n := range always {
			if err == nil {
				_, err = tx.Exec(cctx, fmt.Sprintf("ALTER TABLE %s DISABLE TRIGGER %s", t.Qualified(), col(n)))
			}
		}
		if err == nil {
			err = tx.QueryRow(cctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s FOR UPDATE", ver, t.Qualified(), where), tenant, bad).Scan(&old)
		}
		if err == nil {
			_, err = tx.Exec(cctx, fmt.Sprintf("UPDATE %s SET %s = NULL WHERE %s", t.Qualified(), ver, where), tenant, bad)
		}
		if err == nil {
			_, err = tx.Exec(cctx, fmt.Sprintf("INSERT INTO %s (%s, %s, %s, %s, %s) VALUES ('', $1, 1, %s, jsonb_build_object('tenant', '', 'item', $1::text, 'v', 1))",
				t.Qualified(), col(t.TenantColumn), col(t.ItemColumn), ver, col(t.StateColumn), payload, litActive(t.ActiveState)), "chaos-bad-"+strconv.FormatInt(time.Now().UnixNano(), 36))
		}
		for _, n := range always {
			if err == nil {
				_, err = tx.Exec(cctx, fmt.Sprintf("ALTER TABLE %s ENABLE ALWAYS TRIGGER %s", t.Qualified(), col(n)))
			}
		}
		if err == nil {
			err = tx.Commit(cctx)
		}
		if err != nil {
			tx.Rollback(context.Background())
			return "", errors.Join(fmt.Errorf("bad rows: %w", err), putBack())
		}
	}
	// The canary: a change after the bad rows, as the SQL writers make them.
	canary, cv := "", int64(0)
	for range 20 {
		canary = in.load.hotItem()
		if canary == bad {
			continue
		}
		err := conn.QueryRow(cctx, fmt.Sprintf("UPDATE %s SET %s = %s + 1, %s = jsonb_build_object('tenant', %s, 'item', %s, 'v', %s + 1) WHERE %s RETURNING %s",
			t.Qualified(), ver, ver, payload, col(t.TenantColumn), col(t.ItemColumn), ver, where, ver), tenant, canary).Scan(&cv)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return "", errors.Join(fmt.Errorf("canary: %w", err), putBack())
		}
		break
	}
	// The canary is through once the watermark (every partition) passes its
	// commit: every change up to it was applied. A floor is no evidence (a
	// reader's fill of the new version raises it too). Alone in a run, the
	// pipeline has the bound; among other faults, which stop capture for up
	// to long-outage's 50 s, it has canaryWaitAmongFaults.
	committed := time.Now()
	wait := in.load.rec.checker.Bound
	if len(s.cfg.Kinds()) > 1 {
		wait = canaryWaitAmongFaults
	}
	reached, after := false, time.Duration(0)
	for time.Since(committed) < wait && cctx.Err() == nil {
		if age, err := s.watermarkAge(cctx); err == nil && time.Now().Add(-age).After(committed) {
			reached, after = true, time.Since(committed)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	err = putBack()
	what := fmt.Sprintf("%s/%s version NULL and a row with an empty tenant; canary %s/%s v%d", tenant, bad, tenant, canary, cv)
	if !reached {
		in.load.rec.addViolation(Violation{Kind: KindPipelineStopped,
			Detail: fmt.Sprintf("%s: the watermark did not pass the canary's commit within %s: capture stopped on a bad row", what, wait)})
		what += fmt.Sprintf(": the watermark did not pass the canary within %s", wait)
	} else {
		what += fmt.Sprintf(": the watermark passed it %s after its commit", after.Round(100*time.Millisecond))
	}
	return what, err
}
