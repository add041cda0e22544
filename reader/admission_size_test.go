package reader

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// trustedClock is a clock the guard has vouched for.
type trustedClock struct{}

func (trustedClock) Now() time.Time  { return time.Now() }
func (trustedClock) Wall() time.Time { return time.Now() }
func (trustedClock) Trusted() bool   { return true }

// newTestReader is a Reader over a real cache tier on rdb, with a source
// that has no items.
func newTestReader(t *testing.T, rdb *redis.Client) *Reader {
	t.Helper()
	none := SourceFunc(func(context.Context, string, string) (Item, error) { return Item{}, nil })
	return newTestReaderOf(t, rdb, none, nil, nil)
}

// newTestReaderOf is a Reader over a real cache tier on rdb reading src,
// the reader's and the cache's configs changed by rcfg and ccfg when given.
func newTestReaderOf(t *testing.T, rdb *redis.Client, src Source, rcfg func(*Config), ccfg func(*cache.Config)) *Reader {
	t.Helper()
	return newTestReaderWith(t, rdb, src, rcfg, ccfg, nil)
}

// newTestReaderWith is newTestReaderOf with its dependencies changed by deps
// when given (a tracer, the cache seen through a test's eyes).
func newTestReaderWith(t *testing.T, rdb *redis.Client, src Source, rcfg func(*Config), ccfg func(*cache.Config), deps func(*Deps)) *Reader {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SourcePool = "test"
	cfg.Mapping = "test.items#0"
	if rcfg != nil {
		rcfg(&cfg)
	}
	d := Deps{Source: src, Cache: newTestCache(t, rdb, ccfg), Redis: rdb, Clock: trustedClock{}}
	if deps != nil {
		deps(&d)
	}
	rd, err := New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Close)
	return rd
}

// newTestCache is a cache-tier client on rdb with the design's config,
// changed by ccfg when given (its watermark poller is not run).
func newTestCache(t *testing.T, rdb *redis.Client, ccfg func(*cache.Config)) *cache.Client {
	t.Helper()
	c := cache.DefaultConfig()
	if ccfg != nil {
		ccfg(&c)
	}
	cc, err := cache.New(c, cache.Deps{Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// With the product defaults (2,000 fills/s, a 2-minute turnover), a small
// cache sizes the fill rate down: 2,000 entries fit in its maxmemory, so one
// process may fill about 17/s, and a scan of cold ids in one instant caches
// about that many of them, not 2,000.
func TestAdmissionSizedFromTheCache(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := testenv.Context(t, 30*time.Second)
	rd := newTestReader(t, rdb)
	pipe := rdb.Pipeline()
	for i := range 1000 {
		pipe.Set(ctx, fmt.Sprintf("other:%d", i), strings.Repeat("x", 1024), 0)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	used := usedMemory(t, ctx, rdb)
	keys := rdb.DBSize(ctx).Val()
	// Room for as many keys again as the server holds now, of their mean size.
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(2*used, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.ConfigSet(context.Background(), "maxmemory", "0") })
	rd.sizeAdmission(ctx)
	want := float64(2*keys) / DefaultConfig().FillTurnover.Seconds() / float64(rd.procs.count())
	got := rd.admit.effective()
	if got < 0.8*want || got > 1.2*want {
		t.Fatalf("fill rate sized to a cache of about %d entries: %.1f/s, want about %.1f/s (entries / 2 min / processes)", 2*keys, got, want)
	}
	var m dto.Metric
	if err := rd.m.fillRate.Write(&m); err != nil || m.GetGauge().GetValue() != got {
		t.Errorf("tidemark_reader_fill_rate = %v (%v), want %v", m.GetGauge().GetValue(), err, got)
	}
	now := time.Unix(1000, 0)
	admitted := 0
	for i := range 500 {
		if rd.admit.admit("scanner", fmt.Sprintf("cold-%d", i), now) {
			admitted++
		}
	}
	if admitted > int(got)+1 {
		t.Errorf("a scan of 500 cold ids in one instant cached %d, want at most the sized share's burst (%.0f)", admitted, got)
	}
	// maxmemory off: FillRate alone again.
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	rd.sizeAdmission(ctx)
	if got := rd.admit.effective(); got != DefaultConfig().FillRate {
		t.Errorf("without maxmemory: fill rate %.1f/s, want --fill-rate %.0f", got, DefaultConfig().FillRate)
	}
}

func usedMemory(t *testing.T, ctx context.Context, rdb *redis.Client) int64 {
	t.Helper()
	info := rdb.Info(ctx, "memory").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO memory has no used_memory: %s", info)
	return 0
}
