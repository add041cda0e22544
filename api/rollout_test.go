package api

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/rollout"
)

// rolloutInstance is a serve process with its rollout poller running (as
// Serve runs it).
func (e *tenv) rolloutInstance(o instOpts) *instance {
	e.t.Helper()
	in := e.instance(o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { in.srv.rollout.run(ctx); close(done) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return in
}

func (e *tenv) rolloutStore() *rollout.Store {
	e.t.Helper()
	rdb, err := cache.ParseRedisURL(e.redis.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { rdb.Close() })
	return rollout.NewStore(rdb, DefaultConfig().Namespace)
}

// shadowCounts waits until the store holds at least n shadow comparisons
// of tenant and returns its counts.
func shadowCounts(t *testing.T, st *rollout.Store, tenant string, n int64) rollout.Counts {
	t.Helper()
	var got rollout.Counts
	testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%d shadow comparisons recorded for %s", n, tenant), func() error {
		sh, err := st.Shadow(context.Background())
		if err != nil {
			return err
		}
		if got = sh[tenant]; got.Total() < n {
			return fmt.Errorf("counts %v", got)
		}
		return nil
	})
	return got
}

func (e *tenv) setMode(st *rollout.Store, tenant string, mode rollout.Mode, ramp float64) {
	e.t.Helper()
	if _, err := st.Set(context.Background(), tenant, mode, ramp, false, time.Now()); err != nil {
		e.t.Fatal(err)
	}
}

// A mode change reaches every serve process within a bound, without a
// restart: the rollback sends every read of the tenant to the source (no
// cache hit), and back.
func TestRolloutModeChangeSeenByEveryProcess(t *testing.T) {
	e := newEnv(t)
	ins := []*instance{e.rolloutInstance(instOpts{ccfg: longSoft}), e.rolloutInstance(instOpts{ccfg: longSoft})}
	st := e.rolloutStore()
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'a', 1, '{}')`)
	for _, in := range ins {
		e.do("GET", in.item("a"), key, "")
	}
	for i, in := range ins {
		if r := e.do("GET", in.item("a"), key, ""); r.code != 200 || !strings.HasPrefix(r.cacheStatus(), "tidemark; hit") {
			t.Fatalf("process %d before the rollback: %d %q, want a cache hit", i, r.code, r.cacheStatus())
		}
	}
	const bound = 5 * time.Second // the poll is 1 s; the rest is a loaded box's slack
	for _, step := range []struct {
		mode rollout.Mode
		ramp float64
		want string
	}{{rollout.ModeSource, 0, "detail=rollout-source"}, {rollout.ModeCache, 100, "tidemark; hit"}} {
		start := time.Now()
		e.setMode(st, "acme", step.mode, step.ramp)
		seen := make([]time.Duration, len(ins))
		for time.Since(start) < bound {
			all := true
			for i, in := range ins {
				if seen[i] > 0 {
					continue
				}
				if r := e.do("GET", in.item("a"), key, ""); r.code == 200 && strings.Contains(r.cacheStatus(), step.want) {
					seen[i] = time.Since(start)
				} else {
					all = false
				}
			}
			if all {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		for i := range ins {
			if seen[i] == 0 {
				t.Fatalf("%s %g%%: process %d still not answering with %q after %s", step.mode, step.ramp, i, step.want, bound)
			}
		}
		t.Logf("%s %g%%: seen by the two processes after %s and %s", step.mode, step.ramp, seen[0].Round(time.Millisecond), seen[1].Round(time.Millisecond))
	}
}

// Shadow reads answer from the source and compare a sample with the cache:
// a planted older entry (the source moved on, the cache was never told) is
// cache_older_than_allowed once the grace has passed, an unchanged one a
// match, an uncached one missing.
func TestShadowDetectsPlantedOlderEntry(t *testing.T) {
	e := newEnv(t)
	in := e.rolloutInstance(instOpts{ccfg: longSoft, cfg: func(c *Config) {
		c.ShadowSample, c.ShadowGrace, c.RolloutPoll = 1, 300*time.Millisecond, 100*time.Millisecond
	}})
	st := e.rolloutStore()
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		VALUES ('acme', 'old', 1, '{"v":1}'), ('acme', 'same', 1, '{}'), ('acme', 'uncached', 1, '{}')`)
	for _, id := range []string{"old", "same"} {
		e.do("GET", in.item(id), key, "")
		if r := e.do("GET", in.item(id), key, ""); !strings.HasPrefix(r.cacheStatus(), "tidemark; hit") {
			t.Fatalf("%s not cached: %q", id, r.cacheStatus())
		}
	}
	// The planted older entry: the source moves to version 2 behind the
	// cache's back (no pipeline runs in this test).
	e.exec(`UPDATE catalog.items SET version = 2, display = '{"v":2}' WHERE tenant_id = 'acme' AND item_id = 'old'`)
	e.setMode(st, "acme", rollout.ModeShadow, 0)
	testenv.Eventually(t, 10*time.Second, "the process routes acme to shadow reads", func() error {
		if m, _ := in.srv.rollout.route("acme", "old"); m != rollout.ModeShadow {
			return fmt.Errorf("route %s", m)
		}
		return nil
	})
	for _, id := range []string{"old", "same", "uncached"} {
		r := e.do("GET", in.item(id), key, "")
		if r.code != 200 || !strings.Contains(r.cacheStatus(), "detail=rollout-source") {
			t.Fatalf("shadow read of %s: %d %q, want the source's answer", id, r.code, r.cacheStatus())
		}
		if id == "old" && r.version() != 2 {
			t.Fatalf("shadow read of old answered version %d, want the source's 2", r.version())
		}
	}
	got := shadowCounts(t, st, "acme", 3)
	want := rollout.Counts{rollout.OutcomeMatch: 1, rollout.OutcomeOlder: 1, rollout.OutcomeMissing: 1}
	for _, o := range rollout.Outcomes {
		if got[o] != want[o] {
			t.Fatalf("shadow counts %v, want %v", got, want)
		}
	}
}

// A serve process with a shorter --cache-hard-lifetime than another's
// judges the other's entries by the promise, not by its own setting: an
// entry filled with the default 29.8 s is a match, not a deadline beyond
// the promise (which would count toward halting a ramp).
func TestShadowJudgesDeadlinesByThePromise(t *testing.T) {
	e := newEnv(t)
	filler := e.instance(instOpts{ccfg: longSoft})
	shadow := e.rolloutInstance(instOpts{
		ccfg: func(c *cache.Config) {
			c.HardLifetime, c.SoftMin, c.SoftMax = 10*time.Second, 8*time.Second, 8*time.Second
		},
		cfg: func(c *Config) {
			c.ShadowSample, c.ShadowGrace, c.RolloutPoll, c.L1Size = 1, 300*time.Millisecond, 100*time.Millisecond, 0
		}})
	st := e.rolloutStore()
	key := e.apiKey("acme")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'same', 1, '{}')`)
	e.do("GET", filler.item("same"), key, "")
	if r := e.do("GET", filler.item("same"), key, ""); !strings.HasPrefix(r.cacheStatus(), "tidemark; hit") {
		t.Fatalf("not cached: %q", r.cacheStatus())
	}
	e.setMode(st, "acme", rollout.ModeShadow, 0)
	testenv.Eventually(t, 10*time.Second, "the process routes acme to shadow reads", func() error {
		if m, _ := shadow.srv.rollout.route("acme", "same"); m != rollout.ModeShadow {
			return fmt.Errorf("route %s", m)
		}
		return nil
	})
	if r := e.do("GET", shadow.item("same"), key, ""); r.code != 200 || !strings.Contains(r.cacheStatus(), "detail=rollout-source") {
		t.Fatalf("shadow read: %d %q, want the source's answer", r.code, r.cacheStatus())
	}
	got := shadowCounts(t, st, "acme", 1)
	if got[rollout.OutcomeMatch] != 1 || got.Total() != 1 {
		t.Fatalf("shadow counts %v, want one match", got)
	}
}

// A ramp whose shadow comparisons mismatch past the threshold halts: the
// tenant falls back to its safe step and a raise is refused until forced.
func TestRampHaltsOnShadowMismatches(t *testing.T) {
	e := newEnv(t)
	in := e.rolloutInstance(instOpts{ccfg: longSoft, cfg: func(c *Config) {
		c.ShadowSample, c.ShadowGrace, c.RolloutPoll = 1, 200*time.Millisecond, 100*time.Millisecond
		c.HaltMinChecks, c.HaltMismatchRate = 20, 0.2
	}})
	st := e.rolloutStore()
	key := e.apiKey("acme")
	const n = 200
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'acme', 'k' || g, 1, '{}' FROM generate_series(1, $1::int) g`, n)
	for i := range n {
		e.do("GET", in.item(fmt.Sprintf("k%d", i+1)), key, "")
	}
	// Every cached entry becomes a planted older one.
	e.exec(`UPDATE catalog.items SET version = 2 WHERE tenant_id = 'acme'`)
	e.setMode(st, "acme", rollout.ModeSource, 0)
	e.setMode(st, "acme", rollout.ModeCache, 0)
	e.setMode(st, "acme", rollout.ModeCache, 10)
	testenv.Eventually(t, 10*time.Second, "the process sees acme at 10%", func() error {
		if _, s := in.srv.rollout.route("acme", ""); s.Ramp != 10 {
			return fmt.Errorf("ramp %g", s.Ramp)
		}
		return nil
	})
	for i := range n {
		e.do("GET", in.item(fmt.Sprintf("k%d", i+1)), key, "")
	}
	var got rollout.Setting
	testenv.Eventually(t, 20*time.Second, "acme's ramp halted back to its safe step", func() error {
		ss, _, err := st.Load(context.Background())
		if err != nil {
			return err
		}
		if got = ss["acme"]; got.Halted == "" || got.Ramp != 0 {
			sh, _ := st.Shadow(context.Background())
			return fmt.Errorf("setting %s, shadow counts %s", got, sh["acme"])
		}
		return nil
	})
	t.Logf("halted: %s", got)
	if _, err := st.Set(context.Background(), "acme", rollout.ModeCache, 50, false, time.Now()); !errors.Is(err, rollout.ErrHalted) {
		t.Fatalf("raising the halted ramp: %v, want ErrHalted", err)
	}
}

// The ramp 0 -> 1 -> 10 -> 50 -> 100 % and the rollback of the tenant to
// the source, under load from two processes: at every step the source reads
// Postgres saw stay within the foreground budget (the rest are 503 with
// Retry-After), and the shadow figures of each step are logged.
func TestRampAndRollbackWithinBudget(t *testing.T) {
	e := newEnv(t)
	// The shadow comparisons fill what they find missing under the
	// background budget: every source read counts against both classes.
	const fg, bg, burstWindow = 80.0, 20.0, 100 * time.Millisecond
	const rate = fg + bg
	cfg := func(c *Config) {
		c.ForegroundRate, c.BackgroundRate, c.BudgetBurst = fg, bg, burstWindow
		c.ShadowSample, c.ShadowGrace, c.RolloutPoll = 0.2, time.Second, 200*time.Millisecond
	}
	ins := []*instance{e.rolloutInstance(instOpts{ccfg: longSoft, cfg: cfg}), e.rolloutInstance(instOpts{ccfg: longSoft, cfg: cfg})}
	st := e.rolloutStore()
	key := e.apiKey("acme")
	const items = 400
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'acme', 'k' || g, 1, '{}' FROM generate_series(1, $1::int) g`, items)
	e.setMode(st, "acme", rollout.ModeSource, 0)

	type step struct {
		mode rollout.Mode
		ramp float64
	}
	steps := []step{{rollout.ModeCache, 0}, {rollout.ModeCache, 1}, {rollout.ModeCache, 10}, {rollout.ModeCache, 50},
		{rollout.ModeCache, 100}, {rollout.ModeSource, 0}}
	burst := int64(burstWindow/(time.Second/time.Duration(fg))) + 1 + int64(burstWindow/(time.Second/time.Duration(bg))) + 1
	for _, s := range steps {
		e.setMode(st, "acme", s.mode, s.ramp)
		for i, in := range ins {
			testenv.Eventually(t, 10*time.Second, fmt.Sprintf("process %d sees the step", i), func() error {
				if _, got := in.srv.rollout.route("acme", ""); got.Mode != s.mode || got.Ramp != s.ramp {
					return fmt.Errorf("sees %s", got)
				}
				return nil
			})
		}
		before := e.sourceReads()
		start := time.Now()
		var mu sync.Mutex
		codes, why503 := map[int]int{}, map[string]int{}
		var hits atomic.Int64
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < 3*time.Second {
					r := e.do("GET", ins[w%2].item(fmt.Sprintf("k%d", 1+rand.IntN(items))), key, "")
					if r.code == 503 && r.header.Get("Retry-After") == "" {
						t.Errorf("503 without Retry-After")
					}
					if strings.HasPrefix(r.cacheStatus(), "tidemark; hit") {
						hits.Add(1)
					}
					mu.Lock()
					if r.code == 503 {
						why503[r.cacheStatus()]++
					}
					codes[r.code]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		reads := e.sourceReads() - before
		limit := burst + int64(rate*elapsed.Seconds()) + 1
		var shadow rollout.Counts
		testenv.Eventually(t, 10*time.Second, "the step's shadow counts flushed", func() error {
			time.Sleep(time.Second + 300*time.Millisecond) // the grace and a poll
			sh, err := st.Shadow(context.Background())
			shadow = sh["acme"]
			return err
		})
		total := 0
		for _, c := range codes {
			total += c
		}
		t.Logf("%-6s %3g%%: %d GETs in %s (%.0f/s): codes %v, cache hits %d; source reads %d = %.0f/s (budgets %.0f+%.0f/s, limit %d); shadow %s; 503s %v",
			s.mode, s.ramp, total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), codes, hits.Load(),
			reads, float64(reads)/elapsed.Seconds(), fg, bg, limit, shadow, why503)
		if codes[200]+codes[503] != total {
			t.Fatalf("answers other than 200 and 503: %v", codes)
		}
		if reads > limit {
			t.Fatalf("%s %g%%: source reads %d exceed the budgets %d (burst %d + %v/s over %s)", s.mode, s.ramp, reads, limit, burst, rate, elapsed)
		}
		if s.mode == rollout.ModeSource && hits.Load() > 0 {
			t.Fatalf("rollback: %d answers still came from the cache", hits.Load())
		}
		if s.ramp == 100 && hits.Load() == 0 {
			t.Fatalf("cache 100%%: no cache hits")
		}
	}
}

// A serve process that cannot tell which rollout settings are in force (the
// cache tier's copy lost, Postgres's record unreadable) serves every tenant
// from the source, and one that had settings keeps them; once the record
// can be read again the record's settings are served and the copy put back.
func TestRolloutUndecidedServesFromSource(t *testing.T) {
	e := newEnv(t)
	st := e.rolloutStore()
	acme, globex := e.apiKey("acme"), e.apiKey("globex")
	e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', 'a', 1, '{}'), ('globex', 'g', 1, '{}')`)
	answers := func(in *instance, key, item, what string, ok func(string) bool) {
		t.Helper()
		testenv.Eventually(t, 15*time.Second, what, func() error {
			if r := e.do("GET", in.item(item), key, ""); r.code != 200 || !ok(r.cacheStatus()) {
				return fmt.Errorf("GET %s = %d, Cache-Status %q", item, r.code, r.cacheStatus())
			}
			return nil
		})
	}
	fromSource := func(cs string) bool { return strings.Contains(cs, "detail=rollout-source") }
	old := e.rolloutInstance(instOpts{ccfg: longSoft})
	e.setMode(st, "acme", rollout.ModeSource, 0)
	answers(old, acme, "a", "the rollback in force", fromSource)
	testenv.Eventually(t, 15*time.Second, "the serve process records the change in Postgres", func() error {
		var gen int64
		if err := e.pool.QueryRow(context.Background(), `SELECT generation FROM tidemark.rollout_settings WHERE pool = 'catalog'`).Scan(&gen); err != nil || gen != 1 {
			return fmt.Errorf("generation %d, %v; want 1", gen, err)
		}
		return nil
	})

	e.exec(`ALTER TABLE tidemark.rollout_settings RENAME TO rollout_settings_away`)
	if err := e.redis.Client(t).Del(context.Background(), "{catalog:v1:_rollout}:modes").Err(); err != nil {
		t.Fatal(err)
	}
	fresh := e.rolloutInstance(instOpts{ccfg: longSoft})
	answers(fresh, globex, "g", "a new process that cannot decide serves a tenant without a setting from the source", fromSource)
	for range 5 {
		if r := e.do("GET", old.item("a"), acme, ""); !fromSource(r.cacheStatus()) {
			t.Fatalf("the process that had decided did not keep the rollback: %d %q", r.code, r.cacheStatus())
		}
		time.Sleep(200 * time.Millisecond)
	}

	e.exec(`ALTER TABLE tidemark.rollout_settings_away RENAME TO rollout_settings`)
	answers(fresh, globex, "g", "the new process follows the record once it can be read", func(cs string) bool { return !fromSource(cs) })
	answers(fresh, acme, "a", "the record's rollback", fromSource)
	if c, err := st.Copy(context.Background()); err != nil || c.Gen != 1 || c.Settings["acme"].Mode != rollout.ModeSource {
		t.Fatalf("the copy after the record is readable again: %+v, %v; want generation 1 with acme source", c, err)
	}
}
