package pgha

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/chaos"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

// writer updates random items through the multi-host DSN, reconnecting on
// failure as an application would, and records every commit in src. Its
// sessions commit with synchronous_commit = remote_apply on a primary that
// names the standby synchronous, so no acknowledged write is lost by the
// promotion and src is the new primary's history too (an asynchronous
// standby's loss is the database's, which no cache can judge). A write whose
// outcome is unknown (the primary died under it) is looked up on the
// server the writer reconnects to.
type writer struct {
	dsn  string
	src  *chaos.Source
	last map[string]int64 // the version of each item the writer last committed (it is the only writer)
	wg   sync.WaitGroup

	mu     sync.Mutex
	writes int
	// pending is a write whose outcome is unknown (the primary died under
	// it): looked up once the writer is connected again.
	pending *pendingWrite
}

type pendingWrite struct {
	item string
	v    int64
	at   time.Time
}

func (w *writer) add(item string, v int64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.src.Add(chaos.Commit{Tenant: tenant, Item: item, Version: v, At: at})
	w.last[item] = v
	w.writes++
}

// firstAfter is when the first write sent after at was sent (zero if none).
func (w *writer) firstAfter(at time.Time) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var first time.Time
	for item := range w.last {
		for _, c := range w.src.History(tenant, item) {
			if c.At.After(at) && (first.IsZero() || c.At.Before(first)) {
				first = c.At
			}
		}
	}
	return first
}

// committedAfter reports whether version v of item was written after at.
func (w *writer) committedAfter(item string, v int64, at time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.src.History(tenant, item) {
		if c.Version == v && c.At.After(at) {
			return true
		}
	}
	return false
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}

func startWriter(ctx context.Context, dsn string, items int, src *chaos.Source) *writer {
	w := &writer{dsn: dsn, src: src, last: map[string]int64{}}
	for i := 1; i <= items; i++ {
		w.last[itemID(i)] = 1
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for n := 0; ctx.Err() == nil; n++ {
			if conn == nil {
				if conn = w.connect(ctx); conn == nil {
					time.Sleep(100 * time.Millisecond)
					continue
				}
			}
			if w.pending != nil {
				if err := w.resolve(ctx, conn); err != nil {
					conn.Close(context.Background())
					conn = nil
					continue
				}
			}
			item := itemID(1 + n%items)
			p := &pendingWrite{item: item, v: w.last[item] + 1, at: time.Now()}
			var v int64
			err := conn.QueryRow(ctx, `UPDATE catalog.items SET version = version + 1, updated_at = now(),
				display = jsonb_build_object('tenant', tenant_id, 'item', item_id, 'v', version + 1)
				WHERE tenant_id = $1 AND item_id = $2 RETURNING version`, tenant, item).Scan(&v)
			if err != nil {
				w.pending = p
				conn.Close(context.Background())
				conn = nil
				continue
			}
			w.add(item, v, p.at)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) connect(ctx context.Context) *pgx.Conn {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, w.dsn)
	if err != nil {
		return nil
	}
	if _, err := c.Exec(cctx, "SET synchronous_commit = remote_apply"); err != nil {
		c.Close(context.Background())
		return nil
	}
	return c
}

// resolve looks the pending write up: committed if the row holds its version.
func (w *writer) resolve(ctx context.Context, conn *pgx.Conn) error {
	var v int64
	if err := conn.QueryRow(ctx, "SELECT version FROM catalog.items WHERE tenant_id = $1 AND item_id = $2", tenant, w.pending.item).Scan(&v); err != nil {
		return err
	}
	if v >= w.pending.v {
		w.add(w.pending.item, w.pending.v, w.pending.at)
	}
	w.pending = nil
	return nil
}

// stop ends the writes and settles the last one's outcome.
func (w *writer) stop(t *testing.T, cancel context.CancelFunc) {
	t.Helper()
	cancel()
	w.wg.Wait()
	if w.pending == nil {
		return
	}
	ctx := testenv.Context(t, 30*time.Second)
	conn := w.connect(ctx)
	if conn == nil {
		t.Fatal("writer: cannot reconnect to settle the last write")
	}
	defer conn.Close(context.Background())
	if err := w.resolve(ctx, conn); err != nil {
		t.Fatal(err)
	}
}

// A physical standby (pg_basebackup) is promoted while capture, apply and
// serve run under reads and writes, every process following the primary
// through a multi-host DSN with target_session_attrs=read-write. Postgres
// 15 and 16 have no failover slots: capture finds its slot gone on the new
// primary and sends a reset to every partition; the cache tier forgets what
// it cannot vouch for and serve refills from the new primary. Postgres 17+
// keeps capture's failover slot on the standby: capture resumes with no
// reset. Either way every answer holds the promise by the chaos checker's
// rule, and the source reads of the refill stay within the source budget by
// Postgres's own count.
func TestPromotionUnderLoadThroughServe(t *testing.T) {
	t.Parallel()
	primary := testenv.StartPostgres(t)
	dsn := primary.MigratedDatabase(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	src := chaos.NewSource()
	const items = 300
	key := seedItems(t, dsn, items, src)
	failover := primary.Version() >= 17
	var standby *testenv.Postgres
	if failover {
		standby = testenv.StartStandby(t, primary, "sb1", testenv.PGConf("sync_replication_slots", "on"), testenv.PGConf("hot_standby_feedback", "on"))
		primary.Exec(t, "postgres", "ALTER SYSTEM SET synchronized_standby_slots = 'sb1'")
	} else {
		standby = testenv.StartStandby(t, primary, "")
	}
	// The writers' commits wait until the standby applied them (set after
	// the base backup, so the promoted standby does not wait for itself).
	primary.Exec(t, "postgres", "ALTER SYSTEM SET synchronous_standby_names = '*'")
	primary.Exec(t, "postgres", "SELECT pg_reload_conf()")
	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write", primary.Port, standby.Port, db)
	p := startPipeline(t, multi, key, flags{capture: []string{"--retry-max", "500ms"}})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	sampler := sampleSourceReads(sctx, multi)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	w := startWriter(wctx, multi, items, src)
	rd := p.startReaders(ctx, 4, randomItem(items))
	testenv.Eventually(t, 60*time.Second, "200 writes before the promotion", func() error {
		if n := w.count(); n < 200 {
			return fmt.Errorf("%d writes", n)
		}
		return nil
	})
	if failover {
		sb := connect(t, standby.DSN(db))
		testenv.Eventually(t, 120*time.Second, "the standby holds a synchronised copy of the slot", func() error {
			// A synced slot stays temporary (dropped at promotion) until the
			// standby has caught up with the primary's copy.
			var synced bool
			if err := sb.QueryRow(context.Background(), "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1", p.slot()).Scan(&synced); err != nil || !synced {
				return fmt.Errorf("slot %s on the standby: synced and persistent %v, err %v", p.slot(), synced, err)
			}
			return nil
		})
	}
	writesBefore := w.count()

	primary.Kill()
	promoted := time.Now()
	execSQL(t, connect(t, standby.DSN(db)), "SELECT pg_promote(true, 60)")
	promoteTook := time.Since(promoted)

	// Reset path: the applier moves the cache tier's reset_at past the
	// promotion (every entry observed before it stops being vouched for).
	rdb := p.redis.Client(t)
	resetAt := func() time.Time {
		ms, _ := rdb.HGet(context.Background(), schema.WatermarkKey(promise.Namespace), schema.FieldResetAt).Int64()
		return time.UnixMilli(ms)
	}
	var resetIn time.Duration
	resetSeen := make(chan struct{})
	go func() {
		defer close(resetSeen)
		for ctx.Err() == nil {
			if resetAt().After(promoted) {
				resetIn = time.Since(promoted)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	// Either path: a write committed on the new primary is served.
	var served time.Duration
	testenv.Eventually(t, 2*time.Minute, "a write committed on the new primary is served", func() error {
		for _, a := range rd.all() {
			if a.Status == http.StatusOK && !a.Sent.Before(promoted) && w.committedAfter(a.Item, a.Version, promoted) {
				served = a.Received.Sub(promoted)
				return nil
			}
		}
		return errors.New("no answer yet of a version written after the promotion")
	})
	// Load on past the promise: an invalidation lost in the promotion (a
	// commit the new slot does not carry, on a key whose reset did not come)
	// shows as an answer older than the promise.
	loadEnd := promoted.Add(promise.Bound + 5*time.Second)
	for time.Now().Before(loadEnd) {
		time.Sleep(200 * time.Millisecond)
	}
	w.stop(t, wcancel)
	cancel()
	rd.wg.Wait()
	secs := sampler.stop(scancel)
	answers := rd.all()
	statuses := judge(t, answers, src)

	resets, _ := p.metrics(p.captureMetrics, "tidemark_capture_resets_total") // no series: no reset
	var resetReasons []string
	for l, n := range resets {
		if n > 0 {
			for _, kv := range strings.Split(l, ",") {
				if r, ok := strings.CutPrefix(kv, "reason="); ok && r != capture.ReasonColdStart { // the first start's
					resetReasons = append(resetReasons, fmt.Sprintf("%s: %.0f", r, n))
				}
			}
		}
	}
	sort.Strings(resetReasons)
	<-resetSeen
	if failover && (len(resetReasons) > 0 || resetIn > 0) {
		t.Fatalf("failover-slot path: capture sent resets (%v), reset_at %s (promoted %s), although the promoted server kept the slot",
			resetReasons, resetAt().Format("15:04:05.000"), promoted.Format("15:04:05.000"))
	}
	if !failover && resetIn == 0 {
		at := "unset"
		if ra := resetAt(); ra.UnixMilli() > 0 {
			at = ra.Format("15:04:05.000")
		}
		t.Fatalf("reset path: the cache tier's reset_at is %s, not after the promotion at %s (capture's resets: %v)", at, promoted.Format("15:04:05.000"), resetReasons)
	}
	if !failover && !strings.Contains(strings.Join(resetReasons, " "), "slot_missing") {
		t.Fatalf("reset path: capture's resets %v, want slot_missing", resetReasons)
	}
	if bv := chaos.JudgeBudget(budget, secs, nil, promoted, time.Now()); len(bv) > 0 {
		t.Fatalf("%d samples over the source budget, first: %+v", len(bv), bv[0])
	}
	byClass, total, peak := between(secs, promoted, loadEnd)
	first, firstTotal, _ := between(secs, promoted, promoted.Add(5*time.Second))
	path := "failover-slot path (no reset)"
	if !failover {
		path = fmt.Sprintf("reset path (capture's resets %v), the cache tier's reset_at moved %s after the promotion", resetReasons, resetIn.Round(time.Millisecond))
	}
	t.Logf("Postgres %d: %s; pg_promote returned %s after the kill, the first write on the new primary was sent %s after it and served %s after it; %d writes (%d before the promotion), "+
		"%d answers (by status %v), 0 freshness violations; source reads from the promotion to %s after it: "+
		"%.0f (%v; in the first 5 s %.0f: %v), peak %.0f/s against a budget of %.0f/s total (%.0f foreground), 0 samples over it",
		standby.Version(), path, promoteTook.Round(time.Millisecond), w.firstAfter(promoted).Sub(promoted).Round(time.Millisecond), served.Round(time.Millisecond), w.count(), writesBefore, len(answers), statuses, loadEnd.Sub(promoted).Round(time.Second),
		total, byClass, firstTotal, first, peak, budget.Total, budget.Classes[chaos.ClassForeground])
}
