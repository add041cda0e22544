package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tidemark/tidemark/lab/proc"
	"github.com/tidemark/tidemark/schema"
)

// Fault kinds aimed at what may vouch for a value: a clock, a marker, a
// message, a floor, an entity tag.
const (
	// FaultFutureHeartbeat: a heartbeat an hour ahead (a logical message
	// and a heartbeat-row update, as a Postgres host whose clock stepped
	// would write them), then the appliers stopped past the bound: a
	// watermark taken from it would extend every cached value meanwhile.
	FaultFutureHeartbeat = "future-heartbeat"
	// FaultMalformedHeartbeat: heartbeat-prefix messages that carry no time;
	// capture must skip them and keep going.
	FaultMalformedHeartbeat = "malformed-heartbeat"
	// FaultTruncateFastClock: TRUNCATE of the catalog under cold reads,
	// with one serve process's clock 90 ms fast (inside the clock bound it
	// trusts); a quarter of the items stay away past the bound.
	FaultTruncateFastClock = "truncate-fast-clock"
	// FaultExpiredFloors: items raised far above version 1, their cache
	// keys (value and floor) deleted as FloorTTL or eviction would, then
	// read with min_version of their version.
	FaultExpiredFloors = "min-version-expired-floors"
	// FaultSharedHTTPCache: a reader keeping one HTTP cache for two
	// tenants' keys, revalidating with If-None-Match.
	FaultSharedHTTPCache = "shared-http-cache"
)

// futureAhead is how far ahead the future heartbeat is.
const futureAhead = time.Hour

// fastServeClock is the serve clock offset of the TRUNCATE fault: fast,
// but inside promise.ClockBound, so the stage trusts it.
const fastServeClock = "90ms"

// pgConn is a connection of the fault's own. Its commits do not wait for a
// synchronous standby (a stall injected at the same time holds the load's
// commits, not the fault's).
func (in *injector) pgConn(ctx context.Context) (*pgx.Conn, error) {
	var conn *pgx.Conn
	var err error
	// Asked again for 10 s: another fault may be restarting Postgres (the
	// connection then fails or is reset), which says nothing of this one.
	waitFor(ctx, 10*time.Second, func() bool {
		if conn, err = pgx.Connect(ctx, in.sys.dsn); err != nil {
			return false
		}
		if _, err = conn.Exec(ctx, "SET synchronous_commit = local"); err != nil {
			conn.Close(context.Background())
			conn = nil
			return false
		}
		return true
	})
	return conn, err
}

// onNewConn runs f on a new connection each try, every 100 ms until it
// succeeds or within passes (Postgres restarting among the faults), and
// returns its last error.
func (in *injector) onNewConn(ctx context.Context, within time.Duration, f func(*pgx.Conn) error) error {
	var err error
	waitFor(ctx, within, func() bool {
		var c *pgx.Conn
		if c, err = in.pgConn(ctx); err != nil {
			return false
		}
		defer c.Close(context.Background())
		err = f(c)
		return err == nil
	})
	return err
}

// waitFor polls cond every 100 ms until it holds or within passes.
func waitFor(ctx context.Context, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watermarkHash is the cache tier's watermark hash (nil when unreadable).
func (in *injector) watermarkHash(ctx context.Context) map[string]string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	h, err := in.sys.rdb.HGetAll(ctx, schema.WatermarkKey(namespace)).Result()
	if err != nil {
		return nil
	}
	return h
}

// futureHeartbeat writes heartbeats an hour ahead, waits until the appliers
// have met them (refused, or stored as a watermark), and stops both
// appliers for hold: invalidations wait in Kafka while readers ask. A
// watermark an hour ahead would keep every cached value a hit; the cache
// tier must refuse it, so values reach their hard deadlines and are read
// again.
func (in *injector) futureHeartbeat(ctx context.Context, hold time.Duration) (string, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	refused := func() int64 {
		n, _ := strconv.ParseInt(in.watermarkHash(cctx)[schema.FieldFutureRefused], 10, 64)
		return n
	}
	before := refused()
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	secs := strconv.Itoa(int(futureAhead.Seconds()))
	if _, err := conn.Exec(cctx, `SELECT pg_logical_emit_message(false, 'tidemark',
		((extract(epoch FROM clock_timestamp()) + `+secs+`) * 1000000)::bigint::text)`); err != nil {
		return "", fmt.Errorf("future heartbeat message: %w", err)
	}
	if _, err := conn.Exec(cctx, `UPDATE tidemark.heartbeat SET beat_at = clock_timestamp() + make_interval(secs => `+secs+`) WHERE id = 1`); err != nil {
		return "", fmt.Errorf("future heartbeat row: %w", err)
	}
	target := "message and heartbeat row " + futureAhead.String() + " ahead"
	met := ""
	waitFor(cctx, 20*time.Second, func() bool {
		if refused() > before {
			met = "refused"
			return true
		}
		for f, v := range in.watermarkHash(cctx) {
			if ms, err := strconv.ParseInt(v, 10, 64); err == nil && strings.HasPrefix(f, "p") && time.UnixMilli(ms).After(time.Now().Add(futureAhead/2)) {
				met = "STORED as " + f
				return true
			}
		}
		return false
	})
	if met == "" {
		met = "not yet applied"
	}
	target += " (" + met + "), appliers stopped " + hold.Round(time.Second).String()
	var errs []error
	for _, p := range in.sys.appliers {
		errs = append(errs, p.Signal(syscall.SIGSTOP))
	}
	sleep(ctx, hold)
	for _, p := range in.sys.appliers {
		errs = append(errs, p.Signal(syscall.SIGCONT))
	}
	return target, errors.Join(errs...)
}

// malformedHeartbeat emits heartbeat-prefix messages capture did not
// write, and checks that capture skipped them (counted) and kept going (a
// later heartbeat read back) without any capture process exiting.
func (in *injector) malformedHeartbeat(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 150*time.Second)
	defer cancel()
	pids := map[string]int{}
	for _, p := range in.sys.captures {
		pids[p.Name()] = p.Pid()
	}
	// Sent only once capture streams (a heartbeat read back since the
	// fault began): while a dropped slot is not yet recreated (a slot-drop
	// just lifted), a message goes before the new slot's start and is never
	// decoded, which would say nothing about skipping it.
	if _, began := in.captureBeats(cctx); !waitFor(cctx, 60*time.Second, func() bool {
		_, beats := in.captureBeats(cctx)
		return beats > began
	}) {
		return "", errors.New("capture read back no heartbeat within 60s, so the malformed ones were not sent")
	}
	skipped0, beats0 := in.captureBeats(cctx)
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	for _, m := range []string{"not-a-time", "", "-1e99"} {
		if _, err := conn.Exec(cctx, "SELECT pg_logical_emit_message(false, 'tidemark', $1::text)", m); err != nil {
			return "", fmt.Errorf("malformed heartbeat message: %w", err)
		}
	}
	target := `'not-a-time', '', '-1e99'`
	// A capture held behind an invisible commit (a synchronous-standby
	// stall) reads them late: allow for it.
	var skippedAt float64 = -1
	okay := waitFor(cctx, 75*time.Second, func() bool {
		skipped, beats := in.captureBeats(cctx)
		if skippedAt < 0 && skipped > skipped0 {
			skippedAt = beats
		}
		return skippedAt >= 0 && beats > skippedAt && beats > beats0
	})
	var errs []error
	for _, p := range in.sys.captures {
		if now := p.Pid(); now != pids[p.Name()] {
			errs = append(errs, fmt.Errorf("%s exited after the malformed heartbeat (pid %d, now %d)", p.Name(), pids[p.Name()], now))
		}
	}
	if !okay {
		errs = append(errs, fmt.Errorf("capture did not skip the malformed heartbeats and read a heartbeat after them within 75s (skipped seen: %v)", skippedAt >= 0))
	}
	return target, errors.Join(errs...)
}

// captureBeats sums the captures' skipped-heartbeat and heartbeat counters.
func (in *injector) captureBeats(ctx context.Context) (skipped, beats float64) {
	for _, p := range in.sys.captures {
		fams := scrapeMetrics(ctx, metricsURL(p))
		skipped += counterSum(fams, "tidemark_capture_heartbeats_skipped_total")
		beats += counterSum(fams, "tidemark_capture_heartbeats_total")
	}
	return skipped, beats
}

func metricsURL(p *proc.Process) string {
	args := p.Config().Args
	for i, a := range args {
		if a == "--metrics-addr" && i+1 < len(args) {
			return "http://" + args[i+1] + "/metrics"
		}
	}
	return ""
}

var metricsClient = &http.Client{Timeout: time.Second}

func scrapeMetrics(ctx context.Context, url string) map[string]float64 {
	out := map[string]float64{}
	if url == "" {
		return out
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := metricsClient.Do(req)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return out
	}
	for name, f := range fams {
		for _, m := range f.Metric {
			out[name] += m.GetCounter().GetValue()
		}
	}
	return out
}

func counterSum(fams map[string]float64, name string) float64 { return fams[name] }

// lateItem: the items the TRUNCATE fault keeps away past the bound.
const lateItemSQL = `(item_id LIKE 'item-%' AND substr(item_id, 6)::int % 4 = 0)`

func isLateItem(item string) bool {
	n, err := strconv.Atoi(strings.TrimPrefix(item, "item-"))
	return err == nil && strings.HasPrefix(item, "item-") && n%4 == 0
}

// truncateFastClock restarts one serve process with its clock 90 ms fast,
// reads under a cold-read burst (and the fault's own reads of the items
// kept away, through that process) while the catalog is truncated, puts
// three quarters of the items back (each one version up) two seconds
// later and the rest after the bound, and reads those again first. A read
// taken just before the TRUNCATE but stamped by the fast clock after its
// commit timestamp must not be extended past the reset.
func (in *injector) truncateFastClock(ctx context.Context, hold time.Duration) (string, error) {
	s := in.sys
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold+3*time.Minute)
	defer cancel()
	unlockServe := in.lock("serve")
	served := in.intn(len(s.serves))
	p := s.serves[served]
	target := fmt.Sprintf("%s clock +%s", p.Name(), fastServeClock)
	p.Kill()
	if err := p.Start(ClockOffsetEnv + "=" + fastServeClock); err != nil {
		unlockServe()
		return target, err
	}
	restore := func() error {
		p.Kill()
		err := p.Start()
		unlockServe()
		return err
	}
	waitFor(cctx, 30*time.Second, func() bool { return s.serveAnswers(cctx, served) })

	conn, err := in.pgConn(cctx)
	if err != nil {
		return target, errors.Join(err, restore())
	}
	defer conn.Close(context.Background())
	// The fault's own reads of the items it keeps away, through the fast
	// process, around the TRUNCATE.
	var late []itemKey
	for _, t := range s.tenants {
		for i := 0; i < s.cfg.Items; i++ {
			if it := itemID(i); isLateItem(it) {
				late = append(late, itemKey{t, it})
			}
		}
	}
	readCtx, stopReads := context.WithCancel(cctx)
	var rwg sync.WaitGroup
	var readMu sync.Mutex
	readAgain := map[itemKey]bool{}
	for w := 0; w < 8; w++ {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			for j := w; readCtx.Err() == nil; j += 8 {
				k := late[j%len(late)]
				if a, ok := in.load.getOn(readCtx, served, k.tenant, k.item, 0, true); ok && a.Status == http.StatusOK {
					readMu.Lock()
					readAgain[k] = true
					readMu.Unlock()
				}
			}
		}()
	}
	in.load.coldUntil.Store(time.Now().Add(5 * time.Second).UnixNano())
	time.Sleep(time.Second)
	// Every item comes back (a catalog left empty would void the rest of
	// the run): on a new connection each try, while Postgres restarts.
	reinsert := func(late bool) error {
		cond := "NOT " + lateItemSQL
		if late {
			cond = lateItemSQL
		}
		return in.onNewConn(cctx, time.Minute, func(c *pgx.Conn) error {
			_, err := c.Exec(cctx, `INSERT INTO catalog.items (tenant_id, item_id, version, display)
				SELECT tenant_id, item_id, version + 2, jsonb_build_object('tenant', tenant_id, 'item', item_id, 'v', version + 2)
				FROM chaos.truncated WHERE `+cond+` ON CONFLICT DO NOTHING`)
			return err
		})
	}
	var truncatedAt time.Time
	stmtFailed := false
	err = pgx.BeginFunc(cctx, conn, func(tx pgx.Tx) error {
		for _, q := range []string{
			"SET LOCAL lock_timeout = '30s'",
			// Writers wait, readers do not: the TRUNCATE below takes the
			// exclusive lock only for its own few milliseconds, so reads
			// race its commit as they would in production.
			"LOCK TABLE catalog.items IN EXCLUSIVE MODE",
			// A table, not a temporary one: the items must come back even
			// if this connection does not survive (a Postgres restart).
			"DROP TABLE IF EXISTS chaos.truncated",
			"CREATE TABLE chaos.truncated AS SELECT tenant_id, item_id, version FROM catalog.items WHERE state = 'active'",
			// The history trigger does not see a TRUNCATE: the deletions go
			// into the history in the same transaction.
			"INSERT INTO chaos.history (tenant_id, item_id, version, state) SELECT tenant_id, item_id, version + 1, 'deleted' FROM chaos.truncated",
			"TRUNCATE catalog.items",
		} {
			if _, err := tx.Exec(cctx, q); err != nil {
				stmtFailed = true
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	})
	truncatedAt = time.Now()
	time.Sleep(500 * time.Millisecond)
	stopReads()
	rwg.Wait()
	if err != nil && stmtFailed {
		// No COMMIT was sent: nothing is away.
		return target, errors.Join(fmt.Errorf("truncate: %w", err), restore())
	}
	if err != nil {
		// The commit may have gone through with the connection (a restart):
		// put back whatever is away; conflicts leave present items alone.
		return target, errors.Join(fmt.Errorf("truncate: %w", err), reinsert(false), reinsert(true), restore())
	}
	time.Sleep(2 * time.Second)
	var errs []error
	if err := reinsert(false); err != nil {
		errs = append(errs, fmt.Errorf("re-insert: %w", err))
	}
	errs = append(errs, restore())
	// Past the bound after the TRUNCATE, the items kept away are read
	// again: a value extended past the reset would be served now.
	sleep(ctx, time.Until(truncatedAt.Add(hold)))
	var again []itemKey
	for k := range readAgain {
		again = append(again, k)
	}
	var awg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, k := range again {
		awg.Add(1)
		sem <- struct{}{}
		go func() {
			defer awg.Done()
			defer func() { <-sem }()
			in.load.getOn(cctx, i%len(s.serves), k.tenant, k.item, 0, true)
		}()
	}
	awg.Wait()
	if err := reinsert(true); err != nil {
		errs = append(errs, fmt.Errorf("re-insert the late quarter: %w", err))
	}
	target += fmt.Sprintf("; %d items read through it just before were read again %s after", len(again), hold.Round(time.Second))
	return target, errors.Join(errs...)
}

// serveAnswers reports whether serve process i answers a read.
func (s *system) serveAnswers(ctx context.Context, i int) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.apiBases[i]+"/v1/catalog/items/item-00001", nil)
	req.Header.Set("Authorization", "Bearer "+s.keys[s.tenants[0]])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode < 500
}

// expiredFloors raises a few items per tenant far above version 1, waits
// for their invalidations, deletes their cache keys (value and floor, as
// FloorTTL or eviction would) and reads each with min_version of its
// version, three times through each serve process, then once plainly.
func (in *injector) expiredFloors(ctx context.Context) (string, error) {
	s := in.sys
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	conn, err := in.pgConn(cctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	type raised struct {
		itemKey
		version int64
	}
	var items []raised
	// Items away with a TRUNCATE, or queued behind a lock, are tried again.
	for try := 0; try < 10 && len(items) < 2*len(s.tenants); try++ {
		for _, t := range s.tenants {
			for range 5 {
				it := itemID(in.intn(s.cfg.Items))
				var v int64
				err := conn.QueryRow(cctx, `UPDATE catalog.items SET version = version + 1500, updated_at = now(),
				display = jsonb_build_object('tenant', tenant_id, 'item', item_id, 'v', version + 1500)
				WHERE tenant_id = $1 AND item_id = $2 AND state = 'active' RETURNING version`, t, it).Scan(&v)
				if errors.Is(err, pgx.ErrNoRows) {
					continue // deleted, or away with a TRUNCATE
				}
				if err != nil {
					return "", fmt.Errorf("raise version: %w", err)
				}
				items = append(items, raised{itemKey{t, it}, v})
			}
		}
	}
	// The invalidations reach the cache tier; then the floors go.
	time.Sleep(3 * time.Second)
	for _, it := range items {
		// Asked again for 10 s: a Redis fault beside this one (writes
		// refused, a replica away) is no reason to test nothing.
		var err error
		if !waitFor(cctx, 10*time.Second, func() bool {
			err = s.rdb.Del(cctx, schema.RedisKey(namespace, it.tenant, it.item)).Err()
			return err == nil
		}) {
			return "", fmt.Errorf("delete cache key: %w", err)
		}
	}
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				in.load.getOn(cctx, i%len(s.serves), it.tenant, it.item, it.version, false)
			}
			in.load.getOn(cctx, 0, it.tenant, it.item, 0, false)
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d items raised by 1500 versions, keys deleted, read with min_version", len(items)), nil
}

// storedBody is one entry of the shared HTTP cache.
type storedBody struct {
	etag   string
	tenant string // whose key fetched it
	body   itemBody
}

// sharedHTTPCache reads as a backend-for-frontend would that keeps one
// HTTP cache by URL for every tenant's key (ignoring Vary) and revalidates
// with If-None-Match: a 304 vouches for whatever body it holds, maybe
// another tenant's. Every answer is judged; a 304 as the stored body.
func (in *injector) sharedHTTPCache(ctx context.Context, hold time.Duration) (string, error) { //nolint:unparam // every injector returns (target, error)
	s := in.sys
	var mu sync.Mutex // the cache and the counts
	cache := map[string]storedBody{}
	var n, revalidated, crossed int
	until := time.Now().Add(hold)
	client := &http.Client{Timeout: 5 * time.Second}
	one := func() {
		item := itemID(in.intn(20)) // few items: most asks find a stored body
		tenant := s.tenants[in.intn(len(s.tenants))]
		serve := in.intn(len(s.apiBases))
		path := "/v1/catalog/items/" + item
		mu.Lock()
		st, have := cache[path]
		if have {
			revalidated++
			if st.tenant != tenant {
				crossed++
			}
		}
		mu.Unlock()
		a := Answer{Tenant: tenant, Item: item, Serve: serve + 1, Sent: time.Now()}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.apiBases[serve]+path, nil)
		req.Header.Set("Authorization", "Bearer "+s.keys[tenant])
		if have {
			req.Header.Set("If-None-Match", st.etag)
		}
		resp, err := client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				a.Received = time.Now()
				in.load.rec.add(a)
			}
			return
		}
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		a.Received, a.Status, a.CacheStatus = time.Now(), resp.StatusCode, resp.Header.Get("Cache-Status")
		switch {
		case resp.StatusCode == http.StatusNotModified && have:
			a.Version, a.PayloadTenant, a.PayloadItem, a.PayloadVersion = st.body.Version, st.body.Display.Tenant, st.body.Display.Item, st.body.Display.V
		case resp.StatusCode == http.StatusOK:
			var it itemBody
			if rerr != nil || json.Unmarshal(b, &it) != nil {
				a.Status = 0
				break
			}
			a.Version, a.PayloadTenant, a.PayloadItem, a.PayloadVersion = it.Version, it.Display.Tenant, it.Display.Item, it.Display.V
			if et := resp.Header.Get("ETag"); et != "" {
				mu.Lock()
				cache[path] = storedBody{etag: et, tenant: tenant, body: it}
				mu.Unlock()
			}
		}
		in.load.rec.add(a)
		mu.Lock()
		n++
		mu.Unlock()
	}
	// A few readers at once (a BFF serves many visitors): under load an
	// answer may take seconds, and the cache must still be revalidated often.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) && ctx.Err() == nil {
				one()
				sleep(ctx, 100*time.Millisecond)
			}
		}()
	}
	wg.Wait()
	return fmt.Sprintf("%d answers, %d revalidations (%d with another tenant's stored body)", n, revalidated, crossed), nil
}
