// Package readsbench is `tidemark-lab bench reads`: what a page of many
// items costs through a `tidemark serve` process (run as a separate process,
// as in production), read as one batch (GET /v1/catalog/items:batchGet)
// against the same items as single GETs, alternating in rounds; and what one
// hot key's GETs cost Redis with hot-key replicas off and on, with serve's
// L1 at its default and off. Redis's own counters (INFO commandstats, Lua's
// inner calls included, and INFO stats total_reads_processed: one per socket
// read, so a pipelined round trip counts once) say what each read cost.
package readsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/svgchart"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/migrations"
	"github.com/tidemark/tidemark/schema"
)

// Config drives `tidemark-lab bench reads`.
type Config struct {
	PG     string // --pg; empty: start a private Postgres (and Redis)
	Redis  string // --redis; empty: start a private redis-server
	Binary string // the tidemark executable that runs `serve`

	Items     int           // --items: items a page is drawn from (uniformly)
	BatchSize int           // --batch: items per page
	Pages     int           // --pages: pages in flight (closed loop)
	Duration  time.Duration // --duration: measured time of each mode in each round
	Rounds    int           // --rounds: single/batch pairs, alternating which goes first; the summary takes medians (0: no page phase)

	HotGETs      int     // --hot-gets: GETs of the hot key measured per arm (0: no hot-key phase)
	HotRounds    int     // --hot-rounds: rounds of the four arms
	HotWorkers   int     // --hot-workers: connections reading the hot key (closed loop)
	HotThreshold float64 // --hot-threshold of the replicas-on arms (reads/s reaching the cache tier)
	HotReplicas  int     // --hot-replicas of the replicas-on arms
}

// DefaultConfig: pages of 20 items out of 10,000, 8 pages in flight, three
// rounds of 5 s per mode, with L1 at its default and off; then two rounds of
// 50,000 GETs of one hot key by 32 connections per arm, replicas N=3 from 1
// read/s (with L1 at its 0.5 s default only
// about two reads a second per process reach the cache tier, and only those
// are counted towards the hot set).
func DefaultConfig() Config {
	return Config{Items: 10_000, BatchSize: 20, Pages: 8, Duration: 5 * time.Second, Rounds: 3,
		HotGETs: 50_000, HotRounds: 2, HotWorkers: 32, HotThreshold: 1, HotReplicas: 3}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Binary == "" {
		p.Add("Binary", "the tidemark executable is unknown")
	}
	if c.Items < 1 {
		p.Add("Items", "must be positive (got %d)", c.Items)
	}
	if c.BatchSize < 1 || c.BatchSize > batchMax {
		p.Add("BatchSize", "must be 1 to %d, the API's largest batch (got %d)", batchMax, c.BatchSize)
	} else if c.BatchSize > c.Items {
		p.Add("BatchSize", "must not exceed Items (%d): a page holds distinct items (got %d)", c.Items, c.BatchSize)
	}
	if c.Pages < 1 {
		p.Add("Pages", "must be positive (got %d)", c.Pages)
	}
	if c.Duration < 500*time.Millisecond {
		p.Add("Duration", "must be at least 500ms (got %s)", c.Duration)
	}
	if c.Rounds < 0 {
		p.Add("Rounds", "must be 0 (no page phase) or positive (got %d)", c.Rounds)
	}
	if c.Rounds == 0 && c.HotGETs == 0 {
		p.Add("Rounds", "with HotGETs 0 too nothing would be measured")
	}
	if c.HotGETs < 0 {
		p.Add("HotGETs", "must be 0 (no hot-key phase) or positive (got %d)", c.HotGETs)
	}
	if c.HotGETs > 0 {
		if c.HotRounds < 1 {
			p.Add("HotRounds", "must be positive (got %d)", c.HotRounds)
		}
		if c.HotWorkers < 1 {
			p.Add("HotWorkers", "must be positive (got %d)", c.HotWorkers)
		}
		if !(c.HotThreshold > 0) {
			p.Add("HotThreshold", "must be positive: the replicas-on arms need replicas (got %v)", c.HotThreshold)
		}
		if c.HotReplicas < 1 {
			p.Add("HotReplicas", "must be positive (got %d)", c.HotReplicas)
		}
	}
	if (c.PG == "") != (c.Redis == "") {
		p.Add("Redis", "give both a Postgres and a Redis, or neither (then private servers are started)")
	}
	return p.Err()
}

// batchMax is the API's largest batch (the OpenAPI document's maxItems).
const batchMax = 100

// PageRow is one mode of one round of the page phase.
type PageRow struct {
	L1    bool // serve's default L1 (0.5 s); else --l1-ttl 0
	Round int
	Batch bool // one batch GET per page; else BatchSize single GETs sent at once
	Pages int64
	// Items/s: items answered 200 per second.
	ItemRate float64
	P50, P99 time.Duration // per page: from its first request sent to its last answer
	Errors   int64         // pages with an answer other than 200 for an item, or a transport error
	// Per item, from Redis and serve: commands, socket reads (round trips)
	// and source reads.
	Commands, RedisReads, SourceReads float64
}

// HotRow is one arm of the hot-key phase.
type HotRow struct {
	Round    int
	L1       bool // serve's default L1 (0.5 s); else --l1-ttl 0
	Replicas bool
	GETs     int64
	Rate     float64 // GETs/s, closed loop
	P50, P99 time.Duration
	Errors   int64
	Commands float64 // Redis commands per GET
	// Idle is Redis's command rate with the same serve process and no
	// GETs (its background work: watermark polls, presence, hot set,
	// replica renewals), measured for a second before the GETs; Net is
	// Commands less Idle over the GETs' time.
	Idle, Net float64
	Copies    float64 // reads answered from a copy per GET
	Ready     time.Duration
}

// Result is a run's measurements.
type Result struct {
	Config Config
	Setup  string
	Pages  []PageRow
	Hot    []HotRow
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Run starts what is missing (Postgres, Redis), seeds cfg.Items items and
// runs the two phases, each against serve processes of its own namespace,
// with the freshness watermark kept current (a healthy pipeline). A failed
// run returns what it finished.
func Run(ctx context.Context, cfg Config, deps Deps) (res Result, err error) {
	res.Config = cfg
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	deps = deps.OrDefaults()
	log, progress := deps.Log, deps.Progress
	if cfg.PG == "" {
		fmt.Fprintln(progress, "starting private Postgres and Redis ...")
		srv, err := bench.StartStack(ctx, "reads", log)
		if err != nil {
			return res, fmt.Errorf("bench reads: %w", err)
		}
		defer srv.Stop()
		cfg.PG, cfg.Redis = srv.DSN, srv.Redis.URL()
	} else if _, err := migrations.Up(ctx, cfg.PG, log); err != nil {
		return res, fmt.Errorf("bench reads: migrate: %w", err)
	}
	key, err := bench.SeedTenant(ctx, cfg.PG, bench.PageItems(tenant, cfg.Items))
	if err != nil {
		return res, fmt.Errorf("bench reads: %w", err)
	}
	ropt, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return res, fmt.Errorf("bench reads: Redis URL: %w", err)
	}
	ropt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	b := &bencher{cfg: cfg, rdb: rdb, key: key, progress: progress,
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096}, Timeout: 10 * time.Second}}
	defer b.client.CloseIdleConnections()
	res.Setup = fmt.Sprintf("GOMAXPROCS=%d on %d CPUs; generator, `tidemark serve` (a separate process), Redis and Postgres on the same box; watermark kept current (healthy pipeline); load average (1 min) %s at start",
		runtime.GOMAXPROCS(0), runtime.NumCPU(), loadAvg())
	defer func() { res.Setup += ", " + loadAvg() + " at end" }()

	for _, l1 := range []bool{true, false} {
		if cfg.Rounds == 0 {
			break
		}
		rows, err := b.pages(ctx, l1)
		res.Pages = append(res.Pages, rows...)
		if err != nil {
			return res, err
		}
	}
	if cfg.HotGETs > 0 {
		for r := range cfg.HotRounds {
			for _, arm := range []struct{ l1, on bool }{{true, false}, {true, true}, {false, false}, {false, true}} {
				if r%2 == 1 {
					arm.on = !arm.on // alternate which arm goes first
				}
				row, err := b.hot(ctx, r+1, arm.l1, arm.on)
				if err != nil {
					return res, err
				}
				res.Hot = append(res.Hot, row)
			}
		}
	}
	return res, ctx.Err()
}

const tenant = "bench"

func item(i int) string { return "item-" + strconv.Itoa(i) }

type bencher struct {
	cfg      Config
	rdb      *redis.Client
	client   *http.Client
	key      string
	progress io.Writer
}

// serve starts one serve process on a fresh namespace with the watermark
// kept current; stop ends both.
func (b *bencher) serve(ctx context.Context, prefix string, args ...string) (*bench.Serve, string, func(), error) {
	ns := bench.Namespace(prefix)
	wctx, stopWM := context.WithCancel(ctx)
	waitWM := bench.KeepWatermarkCurrent(wctx, b.rdb, ns)
	srv, err := bench.StartServe(ctx, b.cfg.Binary, b.cfg.PG, b.cfg.Redis, ns, args...)
	if err != nil {
		stopWM()
		waitWM()
		return nil, "", nil, fmt.Errorf("bench reads: %w", err)
	}
	return srv, ns, func() { srv.Stop(); stopWM(); waitWM() }, nil
}

// get sends one GET and reads the body; ok is a 200.
func (b *bencher) get(ctx context.Context, u string) ([]byte, bool) {
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	req.Header.Set("Authorization", "Bearer "+b.key)
	res, err := b.client.Do(req)
	if err != nil {
		return nil, false
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	return body, err == nil && res.StatusCode == http.StatusOK
}

// pages runs the page phase: Rounds x (single, batch) on one serve process
// with the product defaults (L1 off unless l1), after every item was read twice (a miss of a
// new key may be left uncached by fill admission the first time).
func (b *bencher) pages(ctx context.Context, l1 bool) ([]PageRow, error) {
	cfg := b.cfg
	var args []string
	if !l1 {
		args = append(args, "--l1-ttl", "0")
	}
	fmt.Fprintf(b.progress, "pages: serve %s ...\n", strings.Join(args, " "))
	srv, _, stop, err := b.serve(ctx, "benchpage", args...)
	if err != nil {
		return nil, err
	}
	defer stop()
	fmt.Fprintf(b.progress, "priming %d items twice ...\n", cfg.Items)
	for range 2 {
		next := make(chan []string)
		var wg sync.WaitGroup
		for range cfg.Pages {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ids := range next {
					b.get(ctx, batchURL(srv.API, ids))
				}
			}()
		}
		for i := 0; i < cfg.Items; i += cfg.BatchSize {
			var ids []string
			for j := i; j < min(cfg.Items, i+cfg.BatchSize); j++ {
				ids = append(ids, item(j))
			}
			next <- ids
		}
		close(next)
		wg.Wait()
	}
	var rows []PageRow
	for r := range cfg.Rounds {
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, batch := range order {
			row, err := b.pageMode(ctx, srv, r+1, batch)
			row.L1 = l1
			if err != nil {
				return rows, err
			}
			fmt.Fprintf(b.progress, "  round %d %s: %.0f items/s, page p50 %s p99 %s, %.3f Redis commands and %.3f Redis reads per item\n",
				row.Round, modeName(row.Batch, cfg.BatchSize), row.ItemRate, bench.Ms(row.P50), bench.Ms(row.P99), row.Commands, row.RedisReads)
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func batchURL(base string, ids []string) string {
	return base + "/v1/catalog/items:batchGet?" + url.Values{"id": ids}.Encode()
}

func modeName(batch bool, n int) string {
	if batch {
		return fmt.Sprintf("one batch GET of %d", n)
	}
	return fmt.Sprintf("%d single GETs", n)
}

// pageMode reads pages of BatchSize distinct random items for Duration,
// Pages at a time: one batch GET each, or BatchSize single GETs sent at
// once (as a page's fetches would be).
func (b *bencher) pageMode(ctx context.Context, srv *bench.Serve, round int, batch bool) (PageRow, error) {
	cfg := b.cfg
	row := PageRow{Round: round, Batch: batch}
	before, err := b.counters(ctx, srv)
	if err != nil {
		return row, err
	}
	var items, errs atomic.Int64
	lat := make([][]time.Duration, cfg.Pages)
	start := time.Now()
	end := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for w := range cfg.Pages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := mrand.New(mrand.NewPCG(uint64(w), uint64(start.UnixNano())))
			ids := make([]string, cfg.BatchSize)
			for time.Now().Before(end) && ctx.Err() == nil {
				perm := rng.Perm(cfg.Items)[:cfg.BatchSize] // distinct items
				for i, n := range perm {
					ids[i] = item(n)
				}
				t := time.Now()
				ok := 0
				if batch {
					if body, good := b.get(ctx, batchURL(srv.API, ids)); good {
						ok = strings.Count(string(body), `"status":200`)
					}
				} else {
					var n atomic.Int64
					var pw sync.WaitGroup
					for _, id := range ids {
						pw.Add(1)
						go func() {
							defer pw.Done()
							if _, good := b.get(ctx, srv.API+"/v1/catalog/items/"+id); good {
								n.Add(1)
							}
						}()
					}
					pw.Wait()
					ok = int(n.Load())
				}
				lat[w] = append(lat[w], time.Since(t))
				items.Add(int64(ok))
				if ok != cfg.BatchSize {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := b.counters(ctx, srv)
	if err != nil {
		return row, err
	}
	all := slices.Concat(lat...)
	l := bench.Summarize(all)
	row.Pages, row.P50, row.P99, row.Errors = int64(len(all)), l.P50, l.P99, errs.Load()
	row.ItemRate = float64(items.Load()) / elapsed.Seconds()
	if n := float64(row.Pages) * float64(cfg.BatchSize); n > 0 {
		d := after.minus(before)
		row.Commands, row.RedisReads, row.SourceReads = d.commands/n, d.reads/n, d.source/n
	}
	return row, nil
}

// counters are Redis's and serve's counters a step is measured by.
type counters struct{ commands, reads, source, copies float64 }

func (c counters) minus(o counters) counters {
	return counters{c.commands - o.commands, c.reads - o.reads, c.source - o.source, c.copies - o.copies}
}

// counters reads Redis's command count (every cmdstat's calls but INFO's,
// which the bench itself sends), its socket reads, and serve's source reads
// and reads answered from a copy.
func (b *bencher) counters(ctx context.Context, srv *bench.Serve) (counters, error) {
	var c counters
	info, err := b.rdb.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return c, fmt.Errorf("bench reads: INFO: %w", err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_reads_processed:"); ok {
			c.reads, _ = strconv.ParseFloat(v, 64)
			continue
		}
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseFloat(calls, 64)
		if err != nil {
			return c, fmt.Errorf("bench reads: INFO commandstats line %q: %w", line, err)
		}
		c.commands += n
	}
	if c.source, err = srv.Counter("tidemark_api_source_reads_total", ""); err != nil {
		return c, fmt.Errorf("bench reads: %w", err)
	}
	if c.copies, err = srv.Counter("tidemark_replica_reads_total", `result="copy"`); err != nil {
		return c, fmt.Errorf("bench reads: %w", err)
	}
	return c, nil
}

// hotReady bounds the wait for a replicas-on arm's first read from a copy.
const hotReady = 60 * time.Second

// hot runs one arm of the hot-key phase: serve with L1 at its default or
// off, replicas off or on; the key is read until a copy answers (replicas
// on) or for a second, then HotGETs GETs are measured.
func (b *bencher) hot(ctx context.Context, round int, l1, replicas bool) (HotRow, error) {
	cfg := b.cfg
	row := HotRow{Round: round, L1: l1, Replicas: replicas}
	var args []string
	if !l1 {
		args = append(args, "--l1-ttl", "0")
	}
	if replicas {
		args = append(args, "--hot-threshold", strconv.FormatFloat(cfg.HotThreshold, 'f', -1, 64), "--hot-replicas", strconv.Itoa(cfg.HotReplicas))
	}
	fmt.Fprintf(b.progress, "hot key: serve %s ...\n", strings.Join(args, " "))
	srv, ns, stop, err := b.serve(ctx, "benchhot", args...)
	if err != nil {
		return row, err
	}
	defer stop()
	u := srv.API + "/v1/catalog/items/" + item(0)
	// Replicas on: until the key's copies are published (its primary entry
	// names them) and, with L1 off, a copy has answered. With L1 on a copy
	// rarely answers at all: a manifest is held no longer than the L1 entry
	// of the lookup that gave it (both 0.5 s), so the read after an L1 entry
	// expires finds no manifest either and looks up the primary. Replicas
	// off: a second.
	primary := schema.RedisKey(ns, tenant, item(0))
	start := time.Now()
	for {
		rctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		b.closed(rctx, u, cfg.HotWorkers, -1)
		cancel()
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		c, err := b.counters(ctx, srv)
		if err != nil {
			return row, err
		}
		if !replicas && time.Since(start) >= time.Second {
			break
		}
		if replicas {
			m, err := b.rdb.HGet(ctx, primary, cache.FieldReplicas).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return row, fmt.Errorf("bench reads: %w", err)
			}
			if m != "" && (l1 || c.copies > 0) {
				break
			}
		}
		if time.Since(start) > hotReady {
			return row, fmt.Errorf("bench reads: the hot key's copies were not published and read within %s (serve %s)", hotReady, strings.Join(args, " "))
		}
	}
	row.Ready = time.Since(start)
	idle0, err := b.counters(ctx, srv)
	if err != nil {
		return row, err
	}
	i0 := time.Now()
	select {
	case <-ctx.Done():
		return row, ctx.Err()
	case <-time.After(time.Second):
	}
	before, err := b.counters(ctx, srv)
	if err != nil {
		return row, err
	}
	row.Idle = before.minus(idle0).commands / time.Since(i0).Seconds()
	t0 := time.Now()
	lat, errs := b.closed(ctx, u, cfg.HotWorkers, cfg.HotGETs)
	elapsed := time.Since(t0)
	after, err := b.counters(ctx, srv)
	if err != nil {
		return row, err
	}
	l := bench.Summarize(lat)
	row.GETs, row.P50, row.P99, row.Errors = int64(len(lat)), l.P50, l.P99, errs
	row.Rate = float64(len(lat)) / elapsed.Seconds()
	if row.GETs > 0 {
		d := after.minus(before)
		row.Commands, row.Copies = d.commands/float64(row.GETs), d.copies/float64(row.GETs)
		row.Net = max(0, d.commands-row.Idle*elapsed.Seconds()) / float64(row.GETs)
	}
	fmt.Fprintf(b.progress, "  %d GETs, %.0f/s, %.4f Redis commands (%.4f net of idle) and %.4f copy reads per GET\n", row.GETs, row.Rate, row.Commands, row.Net, row.Copies)
	return row, nil
}

// closed sends GETs of u on conns connections back to back until n have
// been sent (n < 0: until ctx ends); it returns their latencies and how many
// were not a 200.
func (b *bencher) closed(ctx context.Context, u string, conns, n int) ([]time.Duration, int64) {
	var sent, errs atomic.Int64
	lat := make([][]time.Duration, conns)
	var wg sync.WaitGroup
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && (n < 0 || sent.Add(1) <= int64(n)) {
				t := time.Now()
				if _, ok := b.get(ctx, u); !ok {
					if ctx.Err() != nil {
						return
					}
					errs.Add(1)
				}
				lat[w] = append(lat[w], time.Since(t))
			}
		}()
	}
	wg.Wait()
	return slices.Concat(lat...), errs.Load()
}

// medianPage is the median of the page rows of one mode.
func (r Result) medianPage(l1, batch bool) (rate float64, p50, p99 time.Duration, cmds, reads float64, ok bool) {
	var rates, c, rd []float64
	var l50, l99 []time.Duration
	for _, row := range r.Pages {
		if row.L1 == l1 && row.Batch == batch {
			rates, c, rd = append(rates, row.ItemRate), append(c, row.Commands), append(rd, row.RedisReads)
			l50, l99 = append(l50, row.P50), append(l99, row.P99)
		}
	}
	if len(rates) == 0 {
		return 0, 0, 0, 0, 0, false
	}
	return bench.Median(rates), bench.Median(l50), bench.Median(l99), bench.Median(c), bench.Median(rd), true
}

// WriteTable writes the report: both tables and their ratios.
func (r Result) WriteTable(w io.Writer) error {
	ew := &bench.ErrWriter{W: w}
	fmt.Fprintf(ew, "%s\n\n", r.Setup)
	if len(r.Pages) > 0 {
		r.writePages(ew)
	}
	if len(r.Hot) > 0 {
		r.writeHot(ew)
	}
	return ew.Err
}

func (r Result) writePages(ew io.Writer) {
	cfg := r.Config
	fmt.Fprintf(ew, "### A page of %d items: one batch GET against %d single GETs\n\n", cfg.BatchSize, cfg.BatchSize)
	fmt.Fprintf(ew, "%d items (each read twice first), pages of %d distinct random items, %d pages in flight (closed loop), %s per mode per round, serve with the product defaults, L1 at its default and then off (one serve process each); per item: Redis commands (INFO commandstats), Redis socket reads (total_reads_processed: round trips), source reads.\n\n",
		cfg.Items, cfg.BatchSize, cfg.Pages, cfg.Duration)
	t := bench.Table{Header: []string{"L1", "round", "mode", "pages", "items/s", "page p50", "page p99", "errors", "Redis commands / item", "Redis reads / item", "source reads / item"}}
	for _, row := range r.Pages {
		t.Add(l1Name(row.L1), strconv.Itoa(row.Round), modeName(row.Batch, cfg.BatchSize), strconv.FormatInt(row.Pages, 10), fmt.Sprintf("%.0f", row.ItemRate),
			bench.Ms(row.P50), bench.Ms(row.P99), strconv.FormatInt(row.Errors, 10),
			fmt.Sprintf("%.3f", row.Commands), fmt.Sprintf("%.3f", row.RedisReads), fmt.Sprintf("%.4f", row.SourceReads))
	}
	t.WriteTo(ew)
	for _, l1 := range []bool{true, false} {
		sr, s50, s99, sc, srd, okS := r.medianPage(l1, false)
		br, b50, b99, bc, brd, okB := r.medianPage(l1, true)
		if okS && okB && sr > 0 && b50 > 0 {
			fmt.Fprintf(ew, "\nL1 %s, medians: one batch GET of %d: **%.0f items/s**, page p50 %s, p99 %s; %d single GETs: %.0f items/s, page p50 %s, p99 %s. "+
				"Batch against singles, same run: **%.2fx items/s**, page p50 %.2fx faster; Redis commands per item %.3f vs %.3f, Redis reads per item %.3f vs %.3f.\n",
				l1Name(l1), cfg.BatchSize, br, bench.Ms(b50), bench.Ms(b99), cfg.BatchSize, sr, bench.Ms(s50), bench.Ms(s99),
				br/sr, float64(s50)/float64(b50), bc, sc, brd, srd)
		}
	}
}

func (r Result) writeHot(ew io.Writer) {
	cfg := r.Config
	{
		fmt.Fprintf(ew, "\n### One hot key: Redis commands per GET, hot-key replicas off and on\n\n")
		fmt.Fprintf(ew, "One serve process per arm (its own namespace), %d connections reading one item back to back; replicas on: `--hot-threshold %g --hot-replicas %d`, measured once the copies are published (and, L1 off, a copy has answered). Commands: INFO commandstats around the %d GETs (Lua's inner calls and serve's background work included); idle: the same process's background command rate over a second without GETs just before, and net: commands less that rate over the GETs' time.\n\n",
			cfg.HotWorkers, cfg.HotThreshold, cfg.HotReplicas, cfg.HotGETs)
		t := bench.Table{Header: []string{"round", "L1", "replicas", "GETs", "GETs/s", "p50", "p99", "errors", "Redis commands / GET", "idle commands/s", "net commands / GET", "copy reads / GET", "until measured"}}
		for _, row := range r.Hot {
			t.Add(strconv.Itoa(row.Round), l1Name(row.L1), onOff(row.Replicas), strconv.FormatInt(row.GETs, 10), fmt.Sprintf("%.0f", row.Rate), bench.Ms(row.P50), bench.Ms(row.P99),
				strconv.FormatInt(row.Errors, 10), fmt.Sprintf("%.4f", row.Commands), fmt.Sprintf("%.0f", row.Idle), fmt.Sprintf("%.4f", row.Net),
				fmt.Sprintf("%.4f", row.Copies), fmt.Sprintf("%.1f s", row.Ready.Seconds()))
		}
		t.WriteTo(ew)
		for _, l1 := range []bool{true, false} {
			off, on := r.hotMedian(l1, false), r.hotMedian(l1, true)
			if off.GETs > 0 && on.GETs > 0 && off.Commands > 0 && off.Rate > 0 {
				fmt.Fprintf(ew, "\nL1 %s, medians: replicas on against off, same run: **%.2fx Redis commands per GET** (%.4f vs %.4f; net of idle %.4f vs %.4f), %.2fx GETs/s (%.0f vs %.0f), %.4f copy reads per GET.\n",
					l1Name(l1), on.Commands/off.Commands, on.Commands, off.Commands, on.Net, off.Net, on.Rate/off.Rate, on.Rate, off.Rate, on.Copies)
			}
		}
	}
}

// hotMedian is the median of each figure over the arm's rounds (GETs 0:
// no such arm).
func (r Result) hotMedian(l1, replicas bool) HotRow {
	var rate, cmds, net, copies []float64
	var gets int64
	for _, row := range r.Hot {
		if row.L1 == l1 && row.Replicas == replicas {
			rate, cmds, net, copies = append(rate, row.Rate), append(cmds, row.Commands), append(net, row.Net), append(copies, row.Copies)
			gets += row.GETs
		}
	}
	if gets == 0 {
		return HotRow{}
	}
	return HotRow{L1: l1, Replicas: replicas, GETs: gets, Rate: bench.Median(rate), Commands: bench.Median(cmds), Net: bench.Median(net), Copies: bench.Median(copies)}
}

func l1Name(on bool) string {
	if on {
		return "default (0.5 s)"
	}
	return "off"
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

// Chart is items/s of a page read as one batch beside the same page as
// single GETs, each round and the medians, with their ratio.
func Chart(r Result) svgchart.BarChart {
	var groups []svgchart.BarGroup
	byRound := map[int][2]float64{}
	var rounds []int
	for _, row := range r.Pages {
		if !row.L1 {
			continue
		}
		v, seen := byRound[row.Round]
		if !seen {
			rounds = append(rounds, row.Round)
		}
		if row.Batch {
			v[1] = row.ItemRate
		} else {
			v[0] = row.ItemRate
		}
		byRound[row.Round] = v
	}
	note := func(v [2]float64) string {
		if v[0] > 0 {
			return fmt.Sprintf("%.2fx", v[1]/v[0])
		}
		return ""
	}
	for _, n := range rounds {
		v := byRound[n]
		groups = append(groups, svgchart.BarGroup{Label: "round " + strconv.Itoa(n), Values: v[:], Note: note(v)})
	}
	sr, _, _, _, _, _ := r.medianPage(true, false)
	br, _, _, _, _, _ := r.medianPage(true, true)
	groups = append(groups, svgchart.BarGroup{Label: "median", Values: []float64{sr, br}, Note: note([2]float64{sr, br})})
	n := r.Config.BatchSize
	return svgchart.BarChart{
		Title:  fmt.Sprintf("tidemark-lab bench reads: items/s, a page of %d items through serve (L1 at its default)", n),
		YLabel: "items/s",
		Series: []string{fmt.Sprintf("%d single GETs", n), fmt.Sprintf("one batch GET of %d", n)},
		Groups: groups,
		YTick:  bench.RateTick,
	}
}

// loadAvg is the 1-minute load average ("?" where /proc is missing).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}
