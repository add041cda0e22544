package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/time/rate"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/lifecycle"
)

// load plays merchants and visitors: SQL transactions of 1-20 rows (one in
// ten rolled back, a few deletions), API PATCHes followed by a read with
// min_version of the written version, and zipf-distributed reads through
// both serve processes. Every read's answer goes to the recorder.
type load struct {
	sys  *system
	rec  *recorder
	cfg  Config
	http *http.Client

	mu   sync.Mutex
	rng  *rand.Rand
	zipf *rand.Zipf

	coldUntil atomic.Int64 // unix nanos: a cold-read burst runs until then
	// coldAbsent: the burst reads ids no one has (each read a source read
	// wherever it lands: nothing it reads is ever cached for another).
	coldAbsent atomic.Bool
	created    atomic.Int64 // items created through the API so far ("new-<n>", per tenant)

	sql writeSQL // the SQL writers' statements on the catalog table

	sqlRows, sqlTx, rolledBack, deletes, patches, creates, patchConflicts, writeErrors atomic.Int64
}

// writeSQL are the SQL writers' statements ($1 tenant, $2 item): an update
// that writes the payload for its new version, and a delete (a tombstone).
type writeSQL struct{ update, delete string }

func newWriteSQL(t catalog.Table) writeSQL {
	set, where := col(t.VersionColumn)+" = "+col(t.VersionColumn)+" + 1", fmt.Sprintf("WHERE %s = $1 AND %s = $2 AND %s = %s",
		col(t.TenantColumn), col(t.ItemColumn), col(t.StateColumn), catalog.Literal(t.ActiveState))
	if t.UpdatedAtColumn != "" {
		set += ", " + col(t.UpdatedAtColumn) + " = now()"
	}
	payload := col(t.Payload[0])
	return writeSQL{
		update: fmt.Sprintf("UPDATE %s SET %s, %s = jsonb_build_object('tenant', %s, 'item', %s, 'v', %s + 1) %s",
			t.Qualified(), set, payload, col(t.TenantColumn), col(t.ItemColumn), col(t.VersionColumn), where),
		delete: fmt.Sprintf("UPDATE %s SET %s, %s = %s, %s = NULL %s",
			t.Qualified(), set, col(t.StateColumn), catalog.Literal(t.DeletedState), payload, where),
	}
}

func newLoad(sys *system, rec *recorder, cfg Config) *load {
	rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x7e5d))
	return &load{sys: sys, rec: rec, cfg: cfg, rng: rng, sql: newWriteSQL(cfg.Table),
		zipf: rand.NewZipf(rng, 1.1, 4, uint64(cfg.Items-1)),
		http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}}
}

func (l *load) intn(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rng.IntN(n)
}

func itemID(i int) string { return fmt.Sprintf("item-%05d", i+1) }

// hotItem is zipf-distributed (a few items take most reads); coldItem uniform.
func (l *load) hotItem() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return itemID(int(l.zipf.Uint64()))
}

func (l *load) coldItem() string { return itemID(l.intn(l.cfg.Items)) }

func (l *load) tenant() string { return l.sys.tenants[l.intn(len(l.sys.tenants))] }

// run generates load until ctx ends.
func (l *load) run(ctx context.Context) {
	var wg sync.WaitGroup
	sqlRate := l.cfg.RateUpdates * 0.9
	patchRate := l.cfg.RateUpdates - sqlRate
	writers := max(1, min(8, int(sqlRate/100)))
	sqlLim := rate.NewLimiter(rate.Limit(sqlRate), 40)
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); l.sqlWriter(ctx, sqlLim) }()
	}
	wg.Add(3)
	go func() { defer wg.Done(); l.dispatch(ctx, patchRate, 32, l.patch) }()
	go func() { defer wg.Done(); l.dispatch(ctx, l.cfg.RateReads, 256, l.visit) }()
	go func() { defer wg.Done(); l.coldReads(ctx) }()
	wg.Wait()
}

// dispatch calls fn rps times a second, at most conc at once; a call that
// finds no free slot is skipped (the run reports what it achieved).
func (l *load) dispatch(ctx context.Context, rps float64, conc int, fn func(context.Context)) {
	lim := rate.NewLimiter(rate.Limit(rps), max(1, int(rps/20)))
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	defer wg.Wait()
	for lim.Wait(ctx) == nil {
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(ctx)
		}()
	}
}

// coldReads runs a burst of uniform reads at three times the source budget
// while a cold-burst fault is on.
func (l *load) coldReads(ctx context.Context) {
	lifecycle.Every(ctx, 50*time.Millisecond, func() {
		if until := l.coldUntil.Load(); time.Now().UnixNano() < until {
			bctx, cancel := context.WithDeadline(ctx, time.Unix(0, until))
			l.dispatch(bctx, 3*l.cfg.SourceBudget, 512, func(ctx context.Context) {
				item := l.coldItem()
				if l.coldAbsent.Load() {
					item = fmt.Sprintf("absent-%d", l.intn(1<<30))
				}
				l.get(context.WithoutCancel(ctx), l.tenant(), item, 0, true)
			})
			cancel()
		}
	})
}

// visit is one visitor read: mostly hot items; 1 in 50 an item created
// during the run, or one about to be (404 until it is).
func (l *load) visit(ctx context.Context) {
	item := l.hotItem()
	if l.intn(50) == 0 {
		item = newItemID(l.intn(int(l.created.Load()) + 5))
	}
	l.get(ctx, l.tenant(), item, 0, false)
}

func newItemID(n int) string { return "new-" + strconv.Itoa(n) }

type itemBody struct {
	Version        int64 `json:"version"`
	CurrentVersion int64 `json:"current_version"`
	Display        struct {
		Tenant string `json:"tenant"`
		Item   string `json:"item"`
		V      int64  `json:"v"`
		// Unbumped: the marker of the fault unbumped-write.
		Unbumped int64 `json:"unbumped"`
		// Table: set only in the rows of the fault second-table-reader's
		// table, never in the catalog's.
		Table string `json:"table"`
	} `json:"display"`
}

func (l *load) do(ctx context.Context, serve int, tenant, method, path string, body []byte, idem string) (int, itemBody, http.Header, error) {
	return l.doAt(ctx, l.sys.apiBases[serve], tenant, method, path, body, idem)
}

// doAt is do against any API base (a process of a fault's own too).
func (l *load) doAt(ctx context.Context, base, tenant, method, path string, body []byte, idem string) (int, itemBody, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		return 0, itemBody{}, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+l.sys.keys[tenant])
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	resp, err := l.http.Do(req)
	if err != nil {
		return 0, itemBody{}, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, itemBody{}, nil, err
	}
	var it itemBody
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusPreconditionFailed {
		if err := json.Unmarshal(b, &it); err != nil {
			return resp.StatusCode, it, resp.Header, fmt.Errorf("decode %q: %w", b, err)
		}
	}
	return resp.StatusCode, it, resp.Header, nil
}

// get reads one item through a random serve process and records the answer.
func (l *load) get(ctx context.Context, tenant, item string, minVersion int64, cold bool) (Answer, bool) {
	return l.getOn(ctx, l.intn(len(l.sys.apiBases)), tenant, item, minVersion, cold)
}

// getOn reads one item through serve process serve (0-based) and records
// the answer.
func (l *load) getOn(ctx context.Context, serve int, tenant, item string, minVersion int64, cold bool) (Answer, bool) {
	path := "/v1/catalog/items/" + item
	if minVersion > 0 {
		path += "?min_version=" + strconv.FormatInt(minVersion, 10)
	}
	a := Answer{Tenant: tenant, Item: item, MinVersion: minVersion, Serve: serve + 1, Cold: cold, Sent: time.Now()}
	code, it, h, err := l.do(ctx, serve, tenant, http.MethodGet, path, nil, "")
	a.Received = time.Now()
	if ctx.Err() != nil {
		return a, false // the run is ending: an interrupted request proves nothing
	}
	if err != nil && code == 0 {
		a.Status = 0
	} else {
		a.Status = code
	}
	if code == http.StatusOK && err == nil {
		a.Version, a.PayloadTenant, a.PayloadItem, a.PayloadVersion = it.Version, it.Display.Tenant, it.Display.Item, it.Display.V
		a.PayloadUnbumped, a.PayloadTable = it.Display.Unbumped, it.Display.Table
	} else if code == http.StatusOK {
		a.Status = 0 // an unreadable body is reported as an error, not judged
	}
	if h != nil {
		a.CacheStatus = h.Get("Cache-Status")
	}
	l.rec.add(a)
	return a, true
}

// create is a merchant adding an item through the API (in every tenant, so
// the ids are shared), then reading it with min_version=1.
func (l *load) create(ctx context.Context) {
	n := int(l.created.Add(1)) - 1
	item := newItemID(n)
	for _, tenant := range l.sys.tenants {
		body, _ := json.Marshal(map[string]any{"item_id": item, "display": map[string]any{"tenant": tenant, "item": item, "v": 1}})
		code, _, _, err := l.do(ctx, l.intn(len(l.sys.apiBases)), tenant, http.MethodPost, "/v1/catalog/items", body,
			fmt.Sprintf("chaos-create-%s-%s", tenant, item))
		if err != nil || (code != http.StatusCreated && code != http.StatusOK) {
			if ctx.Err() == nil {
				l.writeErrors.Add(1)
			}
			continue
		}
		l.creates.Add(1)
		l.get(ctx, tenant, item, 1, false)
	}
}

// patch is a merchant write through the API: read, PATCH with the version
// read, then read its own write with min_version. One in 20 creates an item.
func (l *load) patch(ctx context.Context) {
	if l.intn(20) == 0 {
		l.create(ctx)
		return
	}
	tenant, item := l.tenant(), l.hotItem()
	a, ok := l.get(ctx, tenant, item, 0, false)
	if !ok || a.Status != http.StatusOK {
		return
	}
	next := a.Version + 1
	body, _ := json.Marshal(map[string]any{"expected_version": a.Version,
		"display": map[string]any{"tenant": tenant, "item": item, "v": next}})
	idem := fmt.Sprintf("chaos-%d-%d", time.Now().UnixNano(), l.intn(1<<30))
	code, it, _, err := l.do(ctx, l.intn(len(l.sys.apiBases)), tenant, http.MethodPatch, "/v1/catalog/items/"+item, body, idem)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			l.writeErrors.Add(1)
		}
		return
	case code == http.StatusConflict:
		l.patchConflicts.Add(1)
		return
	case code != http.StatusOK:
		l.writeErrors.Add(1)
		return
	}
	l.patches.Add(1)
	l.get(ctx, tenant, item, it.Version, false)
}

// sqlWriter commits transactions of 1-20 distinct rows straight to the
// catalog (locked in key order, so writers never deadlock); one in ten rolls
// back, and one row in 20,000 is deleted (a tombstone: version+1, no payload).
func (l *load) sqlWriter(ctx context.Context, lim *rate.Limiter) {
	for ctx.Err() == nil {
		n := 1 + l.intn(20)
		if lim.WaitN(ctx, n) != nil {
			return
		}
		type key struct{ tenant, item string }
		seen := map[key]bool{}
		var keys []key
		for len(keys) < n {
			k := key{l.tenant(), l.coldItem()}
			if l.intn(2) == 0 {
				k.item = l.hotItem()
			}
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(a, b key) int {
			if a.tenant != b.tenant {
				return strings.Compare(a.tenant, b.tenant)
			}
			return strings.Compare(a.item, b.item)
		})
		rollback := l.intn(10) == 0
		var b pgx.Batch
		dels := 0
		for _, k := range keys {
			if l.intn(20000) == 0 {
				dels++
				b.Queue(l.sql.delete, k.tenant, k.item)
				continue
			}
			b.Queue(l.sql.update, k.tenant, k.item)
		}
		err := l.tx(ctx, &b, rollback)
		switch {
		case err != nil && ctx.Err() == nil:
			l.writeErrors.Add(1)
			time.Sleep(50 * time.Millisecond) // Postgres restarting or locked: do not spin
		case err == nil && rollback:
			l.rolledBack.Add(1)
		case err == nil:
			l.sqlTx.Add(1)
			l.sqlRows.Add(int64(n))
			l.deletes.Add(int64(dels))
		}
	}
}

func (l *load) tx(ctx context.Context, b *pgx.Batch, rollback bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := l.sys.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback(ctx)
	}
	return tx.Commit(ctx)
}
