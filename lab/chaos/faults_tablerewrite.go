package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// FaultTableRewrite: a DBA's migration rewrites the catalog table in place
// (ALTER TABLE ... ALTER COLUMN <payload> TYPE <its own type> USING ...),
// changing the payload of items of the fault's own, read into the cache
// first, without a new version; then the items are read through every
// serve process past the bound. A rewrite streams no row change at all
// while heartbeats go on: capture must see the table's definition change
// (its fingerprint, checked before every beat) and send a reset marker,
// or the cache serves the values the rewrite replaced: KindStale.
const FaultTableRewrite = "table-rewrite"

func (in *injector) tableRewrite(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	t := s.cfg.Table
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	items, err := in.insertOwnItems(cctx, fmt.Sprintf("rewrite-%d", identityRuns.Add(1)))
	if err != nil {
		return "", err
	}
	sleep(ctx, 2*time.Second) // the inserts' invalidations arrive; then the items are cached
	cached := in.cacheAll(cctx, items)

	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	payload := col(t.Payload[0])
	var typ string
	if err := conn.QueryRow(cctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2`,
		t.Qualified(), t.Payload[0]).Scan(&typ); err != nil {
		return "", fmt.Errorf("read the payload column's type: %w", err)
	}
	ids := make([]string, len(items))
	for i, k := range items {
		ids[i] = litActive(k.item)
	}
	marker := time.Now().UnixNano()
	// The lock waits behind the load's writers; a wait past the timeout
	// fails the fault, not the run.
	if _, err := conn.Exec(cctx, "SET lock_timeout = '20s'"); err != nil {
		return "", err
	}
	began := time.Now()
	if _, err := conn.Exec(cctx, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING CASE WHEN %s IN (%s) THEN %s || jsonb_build_object('unbumped', %d::bigint) ELSE %s END",
		t.Qualified(), payload, typ, col(t.ItemColumn), strings.Join(ids, ", "), payload, marker, payload)); err != nil {
		return "", fmt.Errorf("rewrite the table: %w", err)
	}
	changed := time.Now()
	rewrite := changed.Sub(began)
	rows, err := conn.Query(cctx, fmt.Sprintf("SELECT %s, %s, %s FROM %s WHERE %s = ANY($1)",
		col(t.TenantColumn), col(t.ItemColumn), col(t.VersionColumn), t.Qualified(), col(t.ItemColumn)), itemIDs(items))
	if err != nil {
		return "", fmt.Errorf("read the fault's items: %w", err)
	}
	var read []itemKey
	var at []time.Time
	for rows.Next() {
		var u Unbumped
		if err := rows.Scan(&u.Tenant, &u.Item, &u.Version); err != nil {
			return "", fmt.Errorf("read the fault's items: %w", err)
		}
		u.Marker, u.VisibleBy = marker, changed
		in.load.rec.addUnbumped(u)
		read = append(read, itemKey{u.Tenant, u.Item})
		at = append(at, changed)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read the fault's items: %w", err)
	}

	start := time.Now()
	left := in.readPastBound(ctx, read, at, hold)
	what := fmt.Sprintf("%s rewritten in place (ALTER COLUMN %s TYPE %s USING ..., %s), %d items' payloads changed without a new version (%d of %d answered from the cache before), read for %s",
		t.Name, t.Payload[0], typ, rewrite.Round(time.Millisecond), len(read), cached, len(items), time.Since(start).Round(time.Second))
	if left > 0 {
		what += fmt.Sprintf("; %d of them %s", left, neverJudged)
	}
	return what, nil
}
