package api

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sourceCount is what Postgres has served of this test's database, by
// budget class (pg_stat_statements: one statement per class), at an instant.
type sourceCount struct {
	at      time.Time
	byClass map[string]int64
}

func (c sourceCount) total() int64 {
	var n int64
	for _, v := range c.byClass {
		n += v
	}
	return n
}

var classOfStatement = regexp.MustCompile(`tidemark source read: ([a-z_]+)`)

func (e *tenv) sourceCount() sourceCount {
	e.t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT query, calls FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE '%tidemark source read%'`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	c := sourceCount{at: time.Now(), byClass: map[string]int64{}}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			e.t.Fatal(err)
		}
		class := "unknown"
		if m := classOfStatement.FindStringSubmatch(q); m != nil {
			class = m[1]
		}
		c.byClass[class] += n
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return c
}

// sampler counts the source's reads every 50 ms until stopped.
type sampler struct {
	mu   sync.Mutex
	s    []sourceCount
	stop chan struct{}
	done chan struct{}
}

func (e *tenv) sample() *sampler {
	sp := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sp.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			c := e.sourceCount()
			sp.mu.Lock()
			sp.s = append(sp.s, c)
			sp.mu.Unlock()
			select {
			case <-sp.stop:
				return
			case <-t.C:
			}
		}
	}()
	return sp
}

func (sp *sampler) end() []sourceCount {
	close(sp.stop)
	<-sp.done
	return sp.s
}

// worstWindow is the window of at least 1 s (between two samples) in which
// reads of the classes (all when none is named) most exceeded rate × its
// length: the excess, and a description of it.
func worstWindow(s []sourceCount, rate float64, classes ...string) (float64, string) {
	count := func(c sourceCount) int64 {
		if len(classes) == 0 {
			return c.total()
		}
		var n int64
		for _, k := range classes {
			n += c.byClass[k]
		}
		return n
	}
	worst, what := -1e9, ""
	j := 0
	for i := range s {
		for j < len(s) && s[j].at.Sub(s[i].at) < time.Second {
			j++
		}
		if j == len(s) {
			break
		}
		w := s[j].at.Sub(s[i].at)
		reads := count(s[j]) - count(s[i])
		if ex := float64(reads) - rate*w.Seconds(); ex > worst {
			worst, what = ex, fmt.Sprintf("%d reads in %s from +%s (%v -> %v)", reads, w.Round(time.Millisecond),
				s[i].at.Sub(s[0].at).Round(10*time.Millisecond), s[i].byClass, s[j].byClass)
		}
	}
	return worst, what
}

// The Redis server holding the budget's buckets is killed under a flood of
// cold reads and comes back empty: the source, counted by Postgres, never
// serves more than the rate plus one burst in any second — neither the
// fallback (which starts empty) nor the re-created buckets (which restart
// empty, not full) hand out a fresh burst on top of what was just spent.
func TestBudgetLostWithRedisRestartsEmpty(t *testing.T) {
	e := newEnv(t)
	// A burst as large as a second of the rate, so a fresh one is plain to
	// see against the rate.
	const rate, burst = 40.0, time.Second
	in := e.instance(instOpts{cfg: func(c *Config) {
		c.ForegroundRate, c.BackgroundRate, c.BudgetBurst, c.LookupTimeout, c.L1Size = rate, rate, burst, 250*time.Millisecond, 0
	}})
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'acme', 'c' || g, 1, '{}' FROM generate_series(1, 20000) g`)
	var next atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	var served, refused atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				switch r := e.do("GET", in.item(fmt.Sprintf("c%d", next.Add(1))), key, ""); r.code {
				case 200:
					served.Add(1)
				case 503:
					refused.Add(1)
				}
			}
		}()
	}
	// The flood spends the whole burst and then runs at the rate.
	time.Sleep(3 * time.Second)
	sp := e.sample()
	time.Sleep(1500 * time.Millisecond)
	e.redis.Kill()
	time.Sleep(500 * time.Millisecond)
	if err := e.redis.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	s := sp.end()
	stop.Store(true)
	wg.Wait()
	excess, what := worstWindow(s, rate, classForeground)
	limit := rate*burst.Seconds() + 3
	t.Logf("flood: %d served, %d refused; worst window: %s, %.0f over the rate (%.0f/s), allowed one burst (%.0f)", served.Load(), refused.Load(), what, excess, rate, limit)
	if excess > limit {
		t.Fatalf("the source served %s: %.0f reads over the rate of %.0f/s, more than one burst (%.0f): a lost budget handed out a fresh burst", what, excess, rate, limit)
	}
	if served.Load() == 0 {
		t.Fatal("nothing served: the flood never reached the source")
	}
}
