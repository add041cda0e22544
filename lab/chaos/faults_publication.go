package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/promise"
)

// FaultPublicationGap: the catalog table dropped from capture's publication
// and added back (a DBA's ALTER PUBLICATION ... SET TABLE for another
// table, or a migration tool's) while items of the fault's own, read into
// the cache first, change one version up in between; then the items are
// read through both serve processes past the bound. Heartbeats go on
// meanwhile, and the changes are never streamed: capture must see the
// publication change (its fingerprint, checked before every beat) and send
// a reset marker, or the watermark extends the values the changes
// replaced: KindStale.
const FaultPublicationGap = "publication-gap"

func (in *injector) publicationGap(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	t := s.cfg.Table
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	items, cached, err := in.cachedOwnItems(ctx, cctx, "pubgap")
	if err != nil {
		return "", err
	}

	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	nsp, tbl, _ := catalog.SplitName(t.Name)
	var cols []string
	if err := conn.QueryRow(cctx, `SELECT attnames FROM pg_publication_tables WHERE pubname = $1
		AND schemaname = $2 AND tablename = $3`, promise.Publication, nsp, tbl).Scan(&cols); err != nil {
		return "", fmt.Errorf("read the publication's columns: %w", err)
	}
	for i, c := range cols {
		cols[i] = col(c)
	}
	if _, err := conn.Exec(cctx, fmt.Sprintf("ALTER PUBLICATION %s DROP TABLE %s", promise.Publication, t.Qualified())); err != nil {
		return "", fmt.Errorf("drop the table from the publication: %w", err)
	}
	changedN, uerr := bumpItems(cctx, conn, t, items)
	changed := time.Now()
	// Put back even when the change failed: the run goes on.
	if _, err := conn.Exec(context.WithoutCancel(ctx), fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s (%s)", promise.Publication, t.Qualified(), strings.Join(cols, ", "))); err != nil {
		return "", fmt.Errorf("add the table back to the publication: %w", err)
	}
	if uerr != nil {
		return "", fmt.Errorf("change the fault's items: %w", uerr)
	}

	// Every read is recorded and judged; only a hit past the bound after
	// the change judges the reset.
	start := time.Now()
	at := make([]time.Time, len(items))
	for i := range at {
		at[i] = changed
	}
	left := in.readPastBound(ctx, items, at, hold)
	what := fmt.Sprintf("%s dropped from publication %s and added back, %d items changed in between (%d of %d answered from the cache before), read for %s",
		t.Name, promise.Publication, changedN, cached, len(items), time.Since(start).Round(time.Second))
	if left > 0 {
		what += fmt.Sprintf("; %d of them %s", left, neverJudged)
	}
	return what, nil
}

// bumpItems changes items one version up (their payload with it) and
// returns how many rows changed.
func bumpItems(ctx context.Context, conn *pgx.Conn, t catalog.Table, items []itemKey) (int64, error) {
	ver, payload := col(t.VersionColumn), col(t.Payload[0])
	tag, err := conn.Exec(ctx, fmt.Sprintf("UPDATE %s SET %s = %s + 1, %s = jsonb_build_object('tenant', %s, 'item', %s, 'v', %s + 1) WHERE %s = ANY($1)",
		t.Qualified(), ver, ver, payload, col(t.TenantColumn), col(t.ItemColumn), ver, col(t.ItemColumn)), itemIDs(items))
	return tag.RowsAffected(), err
}

// itemIDs is the items' ids.
func itemIDs(items []itemKey) []string {
	ids := make([]string, len(items))
	for i, k := range items {
		ids[i] = k.item
	}
	return ids
}
