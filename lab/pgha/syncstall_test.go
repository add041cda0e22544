package pgha

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
)

// The cache protocol's settings of the stall test: a floor TTL short enough
// that a stall longer than it fits in the suite (the protocol allows any
// floor TTL at or above the hard lifetime); every cache-tier process takes
// the same.
var stallCache = []string{"--cache-hard-lifetime", "10s", "--cache-soft-min", "3s", "--cache-soft-max", "5s",
	"--cache-negative-ttl", "2s", "--cache-floor-ttl", "15s"}

const stallFloorTTL = 15 * time.Second

// A commit waits for a synchronous standby that never answers
// (synchronous_standby_names names a standby that does not exist) for
// longer than the floor TTL, while readers read the key through a real
// serve process backed by Redis. Every answer is judged by the chaos
// checker, the commit counting from the moment it became visible: no answer
// may be older than the promise once the commit is visible. An invalidation
// sent while the commit was invisible would be spent on a floor that
// expires before the commit shows; the old version filled meanwhile would
// then be extended by the watermark for ever.
func TestSyncStandbyStallThroughServe(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t, testenv.PGConf("synchronous_standby_names", "'ghost'"))
	dsn := pg.MigratedDatabase(t)
	src := chaos.NewSource()
	const items = 20
	key := seedItems(t, dsn, items, src)
	// The auditor is off: it would repair an old version left behind within
	// its sweep, and what must hold the promise here is the order of
	// invalidation and visibility itself.
	p := startPipeline(t, dsn, key, flags{cache: stallCache, serve: []string{"--audit-rate", "0"}})
	// One transaction updates two keys: hot, read throughout, and cold,
	// read late in the stall and then not again until the promise has
	// passed since the commit became visible (a reader who comes back).
	hot, cold := itemID(1), itemID(2)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sctx, scancel := context.WithCancel(ctx)
	sampler := sampleSourceReads(sctx, dsn)
	rd := p.startReaders(ctx, 4, func() string {
		if rand.N(2) == 0 {
			return hot
		}
		return itemID(3 + rand.N(items-2))
	})
	// The writer waits in SyncRep.
	conn := connect(t, dsn)
	sent := time.Now()
	committed, release := testenv.StallCommit(t, dsn, `UPDATE catalog.items SET version = 2, updated_at = now(),
		display = jsonb_build_object('tenant', tenant_id, 'item', item_id, 'v', 2) WHERE tenant_id = $1 AND item_id IN ($2, $3)`, tenant, hot, cold)
	stallStart := time.Now()
	stall := stallFloorTTL + 8*time.Second
	// The cold key is read only once a floor raised at the start of the
	// stall would have expired (FloorTTL, and a lease's 2 s of reads
	// keeping it alive), until the stall ends.
	coldReads := make(chan struct{}) // closed when the stall ends
	coldDone := make(chan struct{})
	go func() {
		defer close(coldDone)
		select {
		case <-coldReads:
			return
		case <-time.After(time.Until(stallStart.Add(stallFloorTTL + 3*time.Second))):
		}
		for {
			select {
			case <-coldReads:
				return
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
				rd.read(ctx, p, cold)
			}
		}
	}()
	for time.Since(stallStart) < stall {
		var v int64
		if err := conn.QueryRow(ctx, "SELECT version FROM catalog.items WHERE tenant_id = $1 AND item_id = $2", tenant, hot).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != 1 {
			t.Fatalf("read version %d during the stall: the commit is visible, the stall is not a stall", v)
		}
		select {
		case err := <-committed:
			t.Fatalf("the write returned during the stall: %v", err)
		case <-time.After(time.Second):
		}
	}

	// Release: from here the commit may be visible.
	close(coldReads)
	<-coldDone
	visibleFrom := time.Now()
	release()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write did not return after synchronous_standby_names was cleared")
	}
	visibleBy := time.Now()
	// The checker's rule for a held commit: it may not be served before it
	// can have been visible (VisibleAfter), and replaces the old version
	// from when it surely was (VisibleBy, the writer's return).
	for _, it := range []string{hot, cold} {
		src.Add(chaos.Commit{Tenant: tenant, Item: it, Version: 2, At: sent, VisibleAfter: visibleFrom, VisibleBy: visibleBy})
	}

	// Read on until the new version has been served for 5 s, or past the
	// promise after visibility (where an old version is a violation).
	var firstNew time.Time
	testenv.Eventually(t, promise.Bound+10*time.Second, "version 2 served for 5 s", func() error {
		for _, a := range rd.all() {
			if a.Item == hot && a.Status == http.StatusOK && a.Version == 2 && (firstNew.IsZero() || a.Received.Before(firstNew)) {
				firstNew = a.Received
			}
		}
		if firstNew.IsZero() {
			if time.Since(visibleFrom) > promise.Bound+5*time.Second {
				return nil // judged below: every version 1 answer from here is stale
			}
			return fmt.Errorf("version 2 not served yet, %s after the commit became visible", time.Since(visibleFrom).Round(time.Second))
		}
		if time.Since(firstNew) < 5*time.Second {
			return fmt.Errorf("version 2 served for %s", time.Since(firstNew).Round(time.Second))
		}
		return nil
	})
	// The reader of the cold key comes back once the promise has passed
	// since the commit surely was visible: version 1 now is a violation.
	time.Sleep(time.Until(visibleBy.Add(promise.Bound + time.Second)))
	var coldBack []int64
	for i := 0; i < 10; i++ {
		coldBack = append(coldBack, rd.read(ctx, p, cold).Version)
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	rd.wg.Wait()
	secs := sampler.stop(scancel)
	answers := rd.all()

	statuses := judge(t, answers, src)
	if firstNew.IsZero() {
		t.Fatalf("version 2 was never served in the %s after the commit became visible", time.Since(visibleFrom).Round(time.Second))
	}
	// No old version after the new one was served (the in-process L1 holds
	// an answer at most 500 ms).
	oldAfter, stallReads, oldDuring := 0, 0, 0
	var lastOld time.Time
	for _, a := range answers {
		if a.Item != hot || a.Status != http.StatusOK {
			continue
		}
		if a.Sent.After(stallStart) && a.Sent.Before(visibleFrom) {
			stallReads++
			if a.Version == 1 {
				oldDuring++
			}
		}
		if a.Version == 1 && a.Received.After(lastOld) {
			lastOld = a.Received
		}
		if a.Version == 1 && a.Sent.After(firstNew.Add(500*time.Millisecond)) {
			oldAfter++
		}
	}
	if oldAfter > 0 {
		t.Fatalf("%d answers of version 1 sent more than 500 ms after version 2 was first served", oldAfter)
	}
	if bv := chaos.JudgeBudget(budget, secs, nil, stallStart, time.Now()); len(bv) > 0 {
		t.Fatalf("%d seconds over the source budget, first: %+v", len(bv), bv[0])
	}
	byClass, total, peak := between(secs, stallStart, visibleBy.Add(5*time.Second))
	wait, err := p.metric(p.captureMetrics, "tidemark_capture_invisible_wait_seconds_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("commit invisible for %s (writer waited in SyncRep; floor TTL %s); capture held it %.1f s; "+
		"%d answers (by status %v), %d of the hot key during the stall (%d of version 1); "+
		"the cold key read %s after visibility: versions %v; version 2 of the hot key first served %s after the commit became visible (last version 1 answer %s after); "+
		"source reads from the stall to 5 s after visibility: %.0f (%v), peak %.0f/s, budget %.0f/s total",
		visibleBy.Sub(stallStart).Round(time.Millisecond), stallFloorTTL, wait, len(answers), statuses, stallReads, oldDuring, (promise.Bound + time.Second), coldBack,
		firstNew.Sub(visibleFrom).Round(time.Millisecond), lastOld.Sub(visibleFrom).Round(time.Millisecond), total, byClass, peak, budget.Total)
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func execSQL(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
