package hotset

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fastTracker is a Tracker whose fast estimate runs on a test clock; the
// estimate itself never talks to Redis.
func fastTracker(t *testing.T, start time.Time) *Tracker {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: fastTick is local
	t.Cleanup(func() { rdb.Close() })
	tr, err := New(DefaultConfig(), Deps{Redis: rdb, Now: func() time.Time { return start }})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func rateOf(top []Hot, tenant, item string) float64 {
	for _, h := range top {
		if h.Tenant == tenant && h.Item == item {
			return h.Rate
		}
	}
	return 0
}

// The fast estimate with the product defaults, on a deterministic clock: a
// key read from cold at 10x a threshold crosses the threshold at the first
// tick, a steady rate converges to itself, the slow set's 10-minute
// estimate of the same reads would still be far below the threshold, and a
// key that stops being read falls below it within 5 s.
func TestFastEstimateFollowsRateWithinSeconds(t *testing.T) {
	const threshold = 200.0
	start := time.Unix(1_800_000_000, 0)
	tr := fastTracker(t, start)
	cfg := tr.cfg
	now := start
	// 1 s ticks; the hot key at 10x the threshold, a background key at 20/s.
	tick := func(hotReads, bgReads int) []Hot {
		for range hotReads {
			tr.Observe("acme", "flash-sale")
		}
		for range bgReads {
			tr.Observe("acme", "steady")
		}
		now = now.Add(cfg.FastInterval)
		return tr.fastTick(now)
	}
	var crossed time.Duration = -1
	for i := range 10 {
		top := tick(int(10*threshold), 20)
		if r := rateOf(top, "acme", "flash-sale"); crossed < 0 && r >= threshold {
			crossed = time.Duration(i+1) * cfg.FastInterval
		}
	}
	if crossed < 0 || crossed > time.Second {
		t.Fatalf("a key read at 10x the threshold (%.0f/s) from cold crossed it after %v, want within the first 1s tick", 10*threshold, crossed)
	}
	top := tick(int(10*threshold), 20)
	if r := rateOf(top, "acme", "flash-sale"); math.Abs(r-10*threshold) > 0.02*10*threshold {
		t.Errorf("steady 2000/s after 11 s: fast estimate %.1f/s, want within 2 %%", r)
	}
	if r := rateOf(top, "acme", "steady"); math.Abs(r-20) > 0.4 {
		t.Errorf("steady 20/s after 11 s: fast estimate %.2f/s, want within 2 %%", r)
	}
	if top[0].Item != "flash-sale" {
		t.Errorf("fastest key %+v, want flash-sale first", top[0])
	}
	// The slow estimate (10-minute time constant) of the same 11 s of reads:
	// r·(1-exp(-t/tau)).
	if slow := 10 * threshold * (1 - math.Exp(-11/cfg.TimeConstant.Seconds())); slow >= threshold {
		t.Errorf("slow estimate after 11 s %.1f/s: the test no longer shows why the fast one is needed", slow)
	}
	// The key stops; the background key goes on.
	var below time.Duration = -1
	for i := range 10 {
		top := tick(0, 20)
		if r := rateOf(top, "acme", "flash-sale"); below < 0 && r < threshold {
			below = time.Duration(i+1) * cfg.FastInterval
		}
	}
	if below < 0 || below > 5*time.Second {
		t.Errorf("a key no longer read stayed above the threshold for %v, want below it within 5s", below)
	}
}

// A process publishes only its FastKeys fastest keys, and an id that takes
// over a counter of the sketch (a scan of cold ids) does not inherit its rate.
func TestFastEstimateKeepsFastestAndInheritsNothing(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	tr := fastTracker(t, start)
	tr.cfg.PerTenant, tr.cfg.FastKeys = 4, 5
	for i := range 12 { // three tenants, four keys each, every key read a different number of times
		for range 100 + 10*i {
			tr.Observe("t"+strconv.Itoa(i%3), "k"+strconv.Itoa(i))
		}
	}
	top := tr.fastTick(start.Add(time.Second))
	if len(top) != 5 {
		t.Fatalf("published %d keys, want FastKeys (5) of the 12 counters held", len(top))
	}
	for i, h := range top {
		if want := "k" + strconv.Itoa(11-i); h.Item != want {
			t.Errorf("rank %d: %+v, want %s (fastest first)", i, h, want)
		}
	}
	// A cold id replaces the smallest counter of t0 (k0, about 39/s): its
	// rate starts from its own read.
	tr.Observe("t0", "cold-id")
	tr.cfg.FastKeys = 12
	top = tr.fastTick(start.Add(2 * time.Second))
	if r := rateOf(top, "t0", "cold-id"); r > 1 {
		t.Errorf("cold id read once shows %.2f/s, want at most its own read's weight (<= 1/s)", r)
	}
}
