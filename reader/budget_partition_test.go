package reader

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/lab/localserver"
	"github.com/tidemark/tidemark/lab/testenv"
)

// budgetRig is a migrated database (its reads counted by
// pg_stat_statements) and a Redis, for Readers that each stand for one serve
// process of one pool: their own Redis connections, their own presence.
type budgetRig struct {
	t     *testing.T
	pool  *pgxpool.Pool
	redis *testenv.Redis
}

func newBudgetRig(t *testing.T, items int) *budgetRig {
	t.Helper()
	ctx := testenv.Context(t, 60*time.Second)
	pool, err := pgxpool.New(ctx, testenv.SharedPostgres(t).MigratedDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, q := range []string{`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`,
		fmt.Sprintf(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
			SELECT t, 'c' || g, 1, '{}' FROM generate_series(1, %d) g, unnest(ARRAY['acme', 't1', 't2']) t`, items)} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	return &budgetRig{t: t, pool: pool, redis: testenv.StartRedis(t)}
}

// client is a Redis client to addr (the server, or a proxy in front of it)
// that notices a dead server quickly, as serve's does.
func (r *budgetRig) client(addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond, MaxRetries: -1})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// serveClient is a Redis client to the rig's server as serve opens one
// (cache.ParseRedisURL): its own connections, serve's timeouts.
func (r *budgetRig) serveClient() redis.UniversalClient {
	r.t.Helper()
	c, err := cache.ParseRedisURL(r.redis.URL())
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

// reader is one serve process's Reader over rdb reading the rig's table,
// running (its presence beating) until the test ends.
func (r *budgetRig) reader(rdb redis.UniversalClient, rcfg func(*Config)) *Reader {
	return r.readerOf(rdb, rcfg, nil, true)
}

// readerOf is reader with the cache tier's config changed by ccfg (nil:
// the default); not run, it is never counted among its pool's readers, as
// a process restarted while the presence key could not be reached.
func (r *budgetRig) readerOf(rdb redis.UniversalClient, rcfg func(*Config), ccfg func(*cache.Config), run bool) *Reader {
	r.t.Helper()
	return r.readerWith(rdb, rcfg, ccfg, run, nil)
}

// readerWith is readerOf with its dependencies changed by deps (nil: as
// they are).
func (r *budgetRig) readerWith(rdb redis.UniversalClient, rcfg func(*Config), ccfg func(*cache.Config), run bool, deps func(*Deps)) *Reader {
	r.t.Helper()
	cachecfg := cache.DefaultConfig()
	if ccfg != nil {
		ccfg(&cachecfg)
	}
	cc, err := cache.New(cachecfg, cache.Deps{Redis: rdb})
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.SourcePool, cfg.L1Size, cfg.LookupTimeout, cfg.RequestTimeout = "p", 0, 100*time.Millisecond, 2*time.Second
	cfg.Mapping = catalog.DefaultTable().Fingerprint()
	if rcfg != nil {
		rcfg(&cfg)
	}
	d := Deps{Source: NewTableSource(r.pool, catalog.DefaultTable(), time.Second), Cache: cc, Redis: rdb,
		Clock: trustedClock{}, Log: testenv.Logger(r.t)}
	if deps != nil {
		deps(&d)
	}
	rd, err := New(cfg, d)
	if err != nil {
		r.t.Fatal(err)
	}
	if !run {
		r.t.Cleanup(rd.Close)
		return rd
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() { defer close(done); runErr = rd.Run(ctx) }()
	r.t.Cleanup(func() {
		cancel()
		<-done
		if runErr != nil {
			r.t.Errorf("the reader refused to run: %v", runErr)
		}
	})
	return rd
}

var sourceClass = regexp.MustCompile(`tidemark source read: ([a-z_]+)`)

// reads is what Postgres has served of the rig's database, by budget class.
func (r *budgetRig) reads() map[string]int64 {
	r.t.Helper()
	rows, err := r.pool.Query(context.Background(), `SELECT query, calls FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE '%tidemark source read%'`)
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	by := map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			r.t.Fatal(err)
		}
		if m := sourceClass.FindStringSubmatch(q); m != nil {
			by[m[1]] += n
		}
	}
	if err := rows.Err(); err != nil {
		r.t.Fatal(err)
	}
	return by
}

// total is the reads of every class.
func total(by map[string]int64) int64 {
	var n int64
	for _, v := range by {
		n += v
	}
	return n
}

// readCount is the source's count of reads at an instant: foreground (n),
// and by class.
type readCount struct {
	at time.Time
	n  int64
	by map[string]int64
}

// of is the count of the classes' reads (all when none is named).
func (c readCount) of(classes ...string) int64 {
	if len(classes) == 0 {
		return total(c.by)
	}
	var n int64
	for _, k := range classes {
		n += c.by[k]
	}
	return n
}

// countReads samples the source's reads every 100 ms until stop is
// called.
func (r *budgetRig) countReads() (stop func() []readCount) {
	var mu sync.Mutex
	var s []readCount
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			by := r.reads()
			c := readCount{at: time.Now(), n: by[ClassForeground], by: by}
			mu.Lock()
			s = append(s, c)
			mu.Unlock()
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() []readCount { close(quit); <-done; return s }
}

// window is the source's reads between from and to (the samples nearest
// inside them): the count, and per second.
func window(s []readCount, from, to time.Time) (int64, float64) {
	i, j := -1, -1
	for k, c := range s {
		if i < 0 && !c.at.Before(from) {
			i = k
		}
		if !c.at.After(to) {
			j = k
		}
	}
	if i < 0 || j <= i {
		return 0, 0
	}
	n := s[j].n - s[i].n
	return n, float64(n) / s[j].at.Sub(s[i].at).Seconds()
}

// worstSecond is the window of one second (at least, between two samples)
// from `from` on in which the source's foreground reads most exceeded
// rate × its length: the excess, and where.
func worstSecond(s []readCount, from time.Time, rate float64) (float64, string) {
	return worstSecondOf(s, from, rate, func(c readCount) int64 { return c.n })
}

// worstSecondOf is worstSecond of the reads count counts.
func worstSecondOf(s []readCount, from time.Time, rate float64, count func(readCount) int64) (float64, string) {
	worst, what := -rate, "no window"
	j := 0
	for i := range s {
		if s[i].at.Before(from) {
			continue
		}
		for j < len(s) && s[j].at.Sub(s[i].at) < time.Second {
			j++
		}
		if j == len(s) {
			break
		}
		n, d := count(s[j])-count(s[i]), s[j].at.Sub(s[i].at)
		if ex := float64(n) - rate*d.Seconds(); ex > worst {
			worst, what = ex, fmt.Sprintf("%d reads in %s from +%s", n, d.Round(time.Millisecond), s[i].at.Sub(from).Round(100*time.Millisecond))
		}
	}
	return worst, what
}

// flood keeps readers per Reader asking for distinct cold items of tenant
// as fast as they are answered (a refusal is asked again after 5 ms, as a
// crowd would) until stop is called; it returns how many were answered
// from the source or cache (Found) per Reader.
func flood(rds []*Reader, readers int, tenant string, items int) (stop func() []int64) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	found := make([]atomic.Int64, len(rds))
	var next atomic.Int64
	for i, rd := range rds {
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !quit.Load() {
					id := fmt.Sprintf("c%d", next.Add(1)%int64(items)+1)
					if res := rd.Get(context.Background(), Query{Tenant: tenant, Item: id}); res.Kind == Found {
						found[i].Add(1)
					} else {
						time.Sleep(5 * time.Millisecond)
					}
				}
			}()
		}
	}
	return func() []int64 {
		quit.Store(true)
		wg.Wait()
		out := make([]int64, len(found))
		for i := range found {
			out[i] = found[i].Load()
		}
		return out
	}
}

// waitCounted waits until every Reader counts n live readers of its pool
// and knows its share.
func waitCounted(t *testing.T, n int64, rds ...*Reader) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, rd := range rds {
		for {
			got, ok := rd.Share(time.Now())
			if ok && got == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a reader counts %d live readers (known %v), want %d", got, ok, n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// Two serve processes of one pool under a flood of cold reads; one loses
// Redis (a proxy in front of it is cut) while the other keeps it. Counted
// by Postgres, the source serves no more than the rate, before the cut and
// after it: the process on Redis reserves the cut-off one's share while the
// latter may admit locally, and the cut-off one stops admitting before the
// other stops reserving.
func TestBudgetHoldsWithOneProcessCutOffFromRedis(t *testing.T) {
	r := newBudgetRig(t, 20000)
	const rate = 40.0
	cfg := func(c *Config) { c.ForegroundRate, c.BackgroundRate = rate, rate }
	proxy, err := localserver.NewProxy(r.redis.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	onRedis := r.reader(r.client(r.redis.Addr), cfg)
	cutOff := r.reader(r.client(proxy.Addr), cfg)
	waitCounted(t, 2, onRedis, cutOff)

	counts := r.countReads()
	stop := flood([]*Reader{onRedis, cutOff}, 4, "acme", 20000)
	start := time.Now()
	time.Sleep(4 * time.Second)
	cut := time.Now()
	proxy.Cut()
	time.Sleep(9 * time.Second)
	found := stop()
	s := counts()

	beforeN, before := window(s, start.Add(time.Second), cut)
	afterN, after := window(s, cut, cut.Add(9*time.Second))
	worst, what := worstSecond(s, cut, rate)
	t.Logf("before the cut: %d reads, %.1f/s; after it: %d reads in 9 s, %.1f/s against %.0f/s; worst second after it: %s (%.0f over); answered (on Redis, cut off): %v",
		beforeN, before, afterN, after, rate, what, worst, found)
	if before == 0 || found[0] == 0 {
		t.Fatalf("the flood read nothing before the cut (%.1f/s) or nothing on Redis (%v)", before, found)
	}
	// A burst is 100 ms of the rate (4 reads); each process's fallback
	// starts empty, and up to 8 reads may be in flight across a sample.
	if limit := 4.0 + 8; worst > limit {
		t.Fatalf("with one process cut off from Redis the source served %s, %.0f over %.0f/s, more than a burst and the reads in flight (%.0f): the process on Redis did not reserve the cut-off one's share", what, worst, rate, limit)
	}
	if after > rate*1.05 {
		t.Fatalf("with one process cut off from Redis the source served %.1f reads/s over 9 s against %.0f/s", after, rate)
	}
}

// As above, and then, while the cut-off process admits its share locally,
// the server loses or rewinds the pool's presence: restored from a
// snapshot taken before the cut-off process's last beats (or a failover to
// a lagging replica), where its entry looks older than the presence TTL, or
// restarted empty. Either way the budget script no longer reserves its
// share. The process on Redis finds its own entry older than it registered
// it, writes back the presence it last read, and the source still serves
// no more than the rate. Each case fails with the check taken out of
// budget.lua and presenceLua.
func TestBudgetHoldsWhenRedisLosesPresenceWithOneProcessCutOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rewind func(ctx context.Context, direct *redis.Client, onRedis, cutOff *Reader) error
	}{
		{"old snapshot", func(ctx context.Context, direct *redis.Client, onRedis, cutOff *Reader) error {
			redisNow, err := direct.Time(ctx).Result()
			if err != nil {
				return err
			}
			ms := redisNow.UnixMilli()
			return direct.ZAdd(ctx, onRedis.procs.procsKey,
				redis.Z{Member: onRedis.procs.member, Score: float64(ms - 7000)},
				redis.Z{Member: cutOff.procs.member, Score: float64(ms - presenceTTL.Milliseconds() - 1000)}).Err()
		}},
		{"restarted empty", func(ctx context.Context, direct *redis.Client, _, _ *Reader) error {
			return direct.FlushAll(ctx).Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each its own database and Redis; most of a case is waiting
			r := newBudgetRig(t, 20000)
			const rate = 40.0
			cfg := func(c *Config) { c.ForegroundRate, c.BackgroundRate = rate, rate }
			proxy, err := localserver.NewProxy(r.redis.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { proxy.Close() })
			direct := r.client(r.redis.Addr)
			onRedis := r.reader(direct, cfg)
			cutOff := r.reader(r.client(proxy.Addr), cfg)
			waitCounted(t, 2, onRedis, cutOff)

			counts := r.countReads()
			stop := flood([]*Reader{onRedis, cutOff}, 4, "acme", 20000)
			time.Sleep(3 * time.Second)
			cut := time.Now()
			proxy.Cut()
			// The cut-off process admits locally from presenceLate after
			// its last beat; then the server loses the presence.
			time.Sleep(presenceLate + 500*time.Millisecond)
			if err := tc.rewind(testenv.Context(t, 10*time.Second), direct, onRedis, cutOff); err != nil {
				t.Fatal(err)
			}
			rewound := time.Now()
			time.Sleep(presenceTTL)
			found := stop()
			s := counts()

			n, after := window(s, rewound, rewound.Add(presenceTTL))
			worst, what := worstSecond(s, rewound, rate)
			t.Logf("after the loss (%.1f s after the cut): %d reads, %.1f/s against %.0f/s; worst second: %s (%.0f over); answered (on Redis, cut off): %v",
				rewound.Sub(cut).Seconds(), n, after, rate, what, worst, found)
			if found[0] == 0 {
				t.Fatalf("the process on Redis read nothing (%v)", found)
			}
			if limit := 4.0 + 8; worst > limit {
				t.Fatalf("after the server lost the pool's presence the source served %s, %.0f over %.0f/s, more than a burst and the reads in flight (%.0f): the process on Redis stopped reserving the cut-off one's share", what, worst, rate, limit)
			}
			if m := counterValue(t, onRedis.procs.rewinds); m < 1 {
				t.Fatalf("presence_rewinds_total = %v after the loss", m)
			}
		})
	}
}

// Two serve processes are counted; a third joins (its first beat) just
// before Redis dies. The two kept counting two: the newcomer must hold, or
// the three shares (1/2 + 1/2 + 1/3) add up above the rate.
func TestBudgetNewcomerJoiningJustBeforeRedisDiesHolds(t *testing.T) {
	r := newBudgetRig(t, 20000)
	const rate = 60.0
	cfg := func(c *Config) { c.ForegroundRate, c.BackgroundRate = rate, rate }
	a := r.reader(r.client(r.redis.Addr), cfg)
	b := r.reader(r.client(r.redis.Addr), cfg)
	waitCounted(t, 2, a, b)
	// The newcomer is built but not run: its only beat is Join, just
	// before Redis dies (a Run would beat once more at once).
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: r.client(r.redis.Addr)})
	if err != nil {
		t.Fatal(err)
	}
	ncfg := DefaultConfig()
	ncfg.SourcePool, ncfg.L1Size, ncfg.LookupTimeout, ncfg.RequestTimeout = "p", 0, 100*time.Millisecond, 2*time.Second
	ncfg.Mapping = catalog.DefaultTable().Fingerprint()
	cfg(&ncfg)
	nc, err := New(ncfg, Deps{Source: NewTableSource(r.pool, catalog.DefaultTable(), time.Second), Cache: cc,
		Redis: r.client(r.redis.Addr), Clock: trustedClock{}, Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.redis.Kill()
	killed := time.Now()
	na, _ := a.Share(killed)
	nb, _ := b.Share(killed)
	nn, _ := nc.Share(killed)
	t.Logf("at the kill the readers count %d, %d and (the newcomer) %d", na, nb, nn)

	counts := r.countReads()
	stop := flood([]*Reader{a, b, nc}, 3, "acme", 20000)
	time.Sleep(7 * time.Second)
	found := stop()
	s := counts()
	n, per := window(s, killed, killed.Add(7*time.Second))
	worst, what := worstSecond(s, killed, rate)
	t.Logf("Redis down: %d reads in 7 s, %.1f/s against %.0f/s; worst second: %s (%.0f over); answered per reader: %v", n, per, rate, what, worst, found)
	// A burst is 100 ms of the rate (6 reads), and 9 readers may have a
	// read in flight across a sample.
	if limit := 6.0 + 9; worst > limit || per > rate*1.05 {
		t.Fatalf("with Redis down the source served %s (%.0f over %.0f/s, allowed %.0f), %.1f/s over 7 s: the newcomer took a share the others had not left it", what, worst, rate, limit, per)
	}
	if found[2] > 0 {
		t.Errorf("the newcomer, counted by no other process, answered %d reads from the source while Redis was down", found[2])
	}
}

// rywFlood: tenant t1 asks the budget for read-your-writes reads (the
// admission a min_version read makes) from 8 goroutines as fast as it
// admits them, and, with alsoCold, for foreground reads from 4; tenant t2
// sends 100 ordinary cold reads (Get) at 10/s. It returns how many of t2's
// were answered, and t1's admissions per second by class. (The tests give
// the budget a burst of 500 ms: on a loaded box t2's reads arrive in
// clumps, which a 100 ms burst of its share would refuse, flood or not.)
func rywFlood(t *testing.T, rcfg func(*Config), alsoCold bool) (int, map[string]float64) {
	r := newBudgetRig(t, 2000)
	rd := r.reader(r.client(r.redis.Addr), rcfg)
	waitCounted(t, 1, rd)
	var quit atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	t1 := map[string]float64{}
	ask := func(class string, n int) {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !quit.Load() {
					release, err := rd.Acquire(context.Background(), class, "t1")
					if err != nil {
						time.Sleep(time.Millisecond)
						continue
					}
					release()
					mu.Lock()
					t1[class]++
					mu.Unlock()
				}
			}()
		}
	}
	ask(ClassReadYourWrites, 8)
	if alsoCold {
		ask(ClassForeground, 4)
	}
	time.Sleep(time.Second) // the flood is on
	mu.Lock()
	clear(t1)
	mu.Unlock()
	start := time.Now()
	var answered atomic.Int64
	failed := map[string]int{}
	var t2 sync.WaitGroup
	tick := time.NewTicker(100 * time.Millisecond)
	for i := range 100 {
		<-tick.C
		t2.Add(1)
		go func() {
			defer t2.Done()
			if res := rd.Get(context.Background(), Query{Tenant: "t2", Item: fmt.Sprintf("c%d", i+1)}); res.Kind == Found {
				answered.Add(1)
			} else {
				mu.Lock()
				failed[res.CacheStatus]++
				mu.Unlock()
			}
		}()
	}
	tick.Stop()
	t2.Wait()
	mu.Lock()
	for c := range t1 {
		t1[c] /= time.Since(start).Seconds()
	}
	mu.Unlock()
	quit.Store(true)
	wg.Wait()
	t.Logf("t2's reads not answered, by Cache-Status: %v", failed)
	return int(answered.Load()), t1
}

// One tenant's read-your-writes flood leaves another tenant's visitors
// their share (issue 36, item 5): 40 foreground and 10 background reads/s
// (the 300 and 100 are more than a flood reaches on a loaded box),
// the read-your-writes rate left to its default (a quarter of the
// foreground rate; it was 3,000, above the whole total).
func TestReadYourWritesFloodLeavesOtherTenantsTheirShare(t *testing.T) {
	got, t1 := rywFlood(t, func(c *Config) { c.ForegroundRate, c.BackgroundRate, c.BudgetBurst = 40, 10, 500*time.Millisecond }, false)
	t.Logf("t1's read-your-writes flood beside t2's 100 cold reads at 10/s: t2 answered %d of 100; t1 admitted %v reads/s (total 50/s)", got, t1)
	if t1[ClassReadYourWrites] == 0 {
		t.Fatal("the flood was admitted no read-your-writes reads")
	}
	if got < 97 {
		t.Fatalf("t2 answered %d of 100 cold reads at 10/s while t1 flooded min_version reads (admitted %v reads/s): t1 took t2's share", got, t1)
	}
}

// Fairness across tenants holds where the total is spent: with the
// read-your-writes ceiling at its highest (the foreground rate, 40/s), t1
// flooding both read-your-writes and cold reads could spend the whole total
// of 50/s (its foreground share, 20/s, and the read-your-writes class are
// more than that together); past its share of the total (25/s) it may
// spend only its share of the total's burst, which leaves t2's visitors
// theirs.
func TestTenantFloodingTwoClassesTakesOnlyItsShareOfTheTotal(t *testing.T) {
	got, t1 := rywFlood(t, func(c *Config) {
		c.ForegroundRate, c.BackgroundRate, c.ReadYourWritesRate, c.BudgetBurst = 40, 10, 40, 500*time.Millisecond
	}, true)
	t.Logf("t1 floods read-your-writes and foreground reads beside t2's 100 cold reads at 10/s: t2 answered %d of 100; t1 admitted %v reads/s (total 50/s)", got, t1)
	if t1[ClassReadYourWrites] == 0 || t1[ClassForeground] == 0 {
		t.Fatalf("the flood was admitted %v reads/s: not both classes", t1)
	}
	if got < 97 {
		t.Fatalf("t2 answered %d of 100 cold reads at 10/s while t1 flooded two classes (admitted %v reads/s): t1 took more than its share of the total", got, t1)
	}
}

// A tenant's share of the total never refuses a read while the total has
// room: on a fresh budget (the total starts with one read left) two tenants
// taking turns are each admitted, the first one again after the second
// arrived (a share that followed the fresh total's debt, doubled when a
// second tenant came, refused it for a burst window: api
// TestOpenAPIStatusCodesAreReal's 503). And a lone tenant flooding two
// classes has the whole total (foreground 40 + read-your-writes 40 asked,
// total 50/s).
func TestTenantShareOfTheTotalRefusesNoneWhileTheTotalHasRoom(t *testing.T) {
	r := newBudgetRig(t, 10)
	rd := r.reader(r.client(r.redis.Addr), nil) // the default rates: 20,000/s in all
	waitCounted(t, 1, rd)
	// Each tenant in a class of its own: the classes' shares stay whole. A
	// millisecond apart: the total (20 reads a millisecond) has room for each.
	for i := range 8 {
		time.Sleep(time.Millisecond)
		tenant, class := "t1", ClassForeground
		if i%2 == 1 {
			tenant, class = "t2", ClassReadYourWrites
		}
		release, err := rd.Acquire(context.Background(), class, tenant)
		if err != nil {
			t.Fatalf("read %d (%s, %s) on a fresh budget at 20,000/s: %v", i+1, tenant, class, err)
		}
		release()
	}

	r = newBudgetRig(t, 10)
	rd = r.reader(r.client(r.redis.Addr), func(c *Config) {
		c.ForegroundRate, c.BackgroundRate, c.ReadYourWritesRate, c.BudgetBurst = 40, 10, 40, 500*time.Millisecond
	})
	waitCounted(t, 1, rd)
	var quit atomic.Bool
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			class := ClassForeground
			if i%2 == 1 {
				class = ClassReadYourWrites
			}
			for !quit.Load() {
				release, err := rd.Acquire(context.Background(), class, "t1")
				if err != nil {
					time.Sleep(time.Millisecond)
					continue
				}
				release()
				admitted.Add(1)
			}
		}()
	}
	time.Sleep(time.Second) // the burst is spent
	from, start := admitted.Load(), time.Now()
	time.Sleep(4 * time.Second)
	got := float64(admitted.Load()-from) / time.Since(start).Seconds()
	quit.Store(true)
	wg.Wait()
	t.Logf("a lone tenant flooding foreground and read-your-writes: %.1f reads/s admitted (total 50/s)", got)
	if got < 45 {
		t.Fatalf("a lone tenant flooding two classes was admitted %.1f reads/s of a total of 50/s: alone it should have the whole total", got)
	}
}

func TestReadYourWritesRateInsideTheForegroundRate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SourcePool, cfg.ForegroundRate, cfg.ReadYourWritesRate = "p", 300, 3000
	cfg.Mapping = "t"
	err := cfg.Validate()
	if err == nil || !regexp.MustCompile(`ReadYourWritesRate.*at most ForegroundRate \(300\)`).MatchString(err.Error()) {
		t.Fatalf("a read-your-writes rate of 3000 over a foreground rate of 300: %v, want a refusal naming both", err)
	}
	cfg.ReadYourWritesRate = 0
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := cfg.readYourWritesRate(); got != 75 {
		t.Fatalf("read-your-writes rate 0 means %v, want a quarter of 300", got)
	}
}

// A lone serve process dies without leaving its pool (SIGKILL; here its
// Redis is cut and it is never asked again) and is started again. Restarted
// in place, under the same instance name, it takes over its entry and reads
// the source at once at the whole rate; a process under another name (a
// replacement elsewhere) finds the dead one's share reserved until its
// presence expires, since that one may be alive and admitting locally.
func TestRestartInPlaceTakesOverItsPresence(t *testing.T) {
	const rate = 40.0
	named := func(name string) func(c *Config) {
		return func(c *Config) { c.ForegroundRate, c.BackgroundRate, c.Instance = rate, rate, name }
	}
	measure := func(name string) float64 {
		t.Helper()
		r := newBudgetRig(t, 20000)
		proxy, err := localserver.NewProxy(r.redis.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { proxy.Close() })
		dead := r.reader(r.client(proxy.Addr), named("host-a|:8080"))
		waitCounted(t, 1, dead)
		proxy.Cut()
		// Past presenceLate: the dead entry is now a late member's.
		time.Sleep(presenceLate + time.Second)
		next := r.reader(r.client(r.redis.Addr), named(name))
		counts := r.countReads()
		stop := flood([]*Reader{next}, 4, "acme", 20000)
		start := time.Now()
		time.Sleep(3 * time.Second)
		stop()
		_, got := window(counts(), start, start.Add(3*time.Second))
		return got
	}
	inPlace := measure("host-a|:8080")
	elsewhere := measure("host-b|:8080")
	t.Logf("source reads in the 3 s after the start: restarted in place %.1f/s, under another name %.1f/s (rate %.0f/s)", inPlace, elsewhere, rate)
	if inPlace < rate/2 {
		t.Fatalf("restarted in place under its own name, the process read %.1f/s against a rate of %.0f/s: its dead predecessor's share was held back from it", inPlace, rate)
	}
	if elsewhere > rate/4 {
		t.Fatalf("a process under another name read %.1f/s while the late member's whole share (it counted one process) was reserved", elsewhere)
	}
}
