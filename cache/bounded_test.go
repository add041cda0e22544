package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// A hung Redis (SIGSTOP: connected, not answering) does not hold a Lookup
// past its context deadline: clients from ParseRedisURL bind socket reads to
// the context, not to go-redis's 3 s read timeout.
func TestLookupBoundedWhenRedisHangs(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		name := map[bool]string{false: "standalone", true: "cluster"}[cluster]
		t.Run(name, func(t *testing.T) {
			var url string
			var pause, resume func()
			if cluster {
				rc := testenv.StartRedisCluster(t, 3)
				url = rc.URL()
				pause = func() {
					for _, n := range rc.Nodes {
						n.Pause()
					}
				}
				resume = func() {
					for _, n := range rc.Nodes {
						n.Resume()
					}
				}
			} else {
				r := testenv.StartRedis(t)
				url, pause, resume = r.URL(), r.Pause, r.Resume
			}
			rdb, err := cache.ParseRedisURL(url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rdb.Close() })
			c, err := cache.New(testConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Lookup(testenv.Context(t, 10*time.Second), "acme", "h", 0); err != nil {
				t.Fatal(err) // connections exist and scripts are loaded before the hang
			}
			pause()
			t.Cleanup(resume)
			const timeout = 250 * time.Millisecond
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				start := time.Now()
				_, err := c.Lookup(ctx, "acme", "h", 0)
				took := time.Since(start)
				cancel()
				if err == nil {
					t.Fatal("lookup against a paused Redis succeeded")
				}
				if took > timeout+250*time.Millisecond {
					t.Fatalf("lookup against a paused Redis took %s with a %s deadline (%v)", took, timeout, err)
				}
			}
		})
	}
}

// FILL refuses an observation time more than cache.MaxClockOffset in Redis's
// future (the filler's clock is fast) and a hard deadline later than the
// observation plus the hard lifetime (never more than promise.Bound).
func TestFillRefusesFutureObservationAndLongLifetime(t *testing.T) {
	r := testenv.StartRedis(t)
	b := &backend{name: "standalone", rdb: r.Client(t), single: r}
	c := newClient(t, b, testConfig())
	ctx := testenv.Context(t, 10*time.Second)
	fill := func(c *cache.Client, item string, obs time.Time) error {
		t.Helper()
		lr, err := c.Lookup(ctx, "acme", item, 0)
		if err != nil || lr.Token.IsZero() {
			t.Fatalf("lookup %s: %+v %v", item, lr, err)
		}
		return c.Fill(ctx, "acme", item, lr.Token, 1, []byte(`"x"`), obs)
	}
	reason := func(err error) cache.Reason {
		var rej *cache.RejectedError
		if errors.As(err, &rej) {
			return rej.Reason
		}
		return ""
	}
	if err := fill(c, "fast", time.Now().Add(2*time.Second)); reason(err) != cache.ReasonClock {
		t.Fatalf("fill observed 2 s in the future: %v, want a clock rejection", err)
	}
	if err := fill(c, "near", time.Now().Add(cache.MaxClockOffset/4)); err != nil {
		t.Fatalf("fill observed within the clock bound: %v", err)
	}
	// Validate refuses a hard lifetime above the promise's (TestHardLifetimeIsBounded);
	// FILL refuses it too, for a filler built without that bound.
	long := newClient(t, b, testConfig())
	long.SetHardLifetimeForTest(40 * time.Second)
	if err := fill(long, "long", time.Now()); reason(err) != cache.ReasonLifetime {
		t.Fatalf("fill with a 40 s hard lifetime: %v, want a lifetime rejection", err)
	}
}
