package hotset

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/schema"
)

// The fast estimate. The shared set above forgets with a time constant of
// minutes: right for warm-up ordering, which should follow what was read
// over the last quarter hour, and far too slow for a key that turns hot in a
// flash sale (a steady rate needs about 0.1 time constants to show a tenth
// of itself). Hot-key replicas read a second estimate instead: every serve
// process keeps an exponentially weighted rate of each counted key with a
// time constant of seconds (fastUpdate), updated every FastInterval, and
// publishes its FastKeys fastest keys with their rates to one shared hash;
// the fast hot set is the sum over the processes whose entries have not
// expired (ReadFast).

//go:embed fastput.lua
var fastPutLua string

//go:embed fastread.lua
var fastReadLua string

var (
	fastPutScript  = redis.NewScript(fastPutLua)
	fastReadScript = redis.NewScript(fastReadLua)
)

// FastKey is the namespace's fast hot set: a hash of "<process> <key>" to
// "<reads/s> <expiry unix ms>", on the same slot as the slow set.
func FastKey(ns string) string { return ns + ":v1:_hot:{hot}:fast" }

// fastUpdate is the fast estimate: an exponentially weighted read rate
// (reads/s) with time constant tau, fed with the n reads counted over each
// interval dt: r·a + (n/dt)·(1-a), a = exp(-dt/tau). A key read steadily at
// r from cold shows r·(1-exp(-t/tau)) after t, so with tau = 2 s a key at
// 10x a threshold crosses it within the first 1 s interval (3.9x), and one
// that stops falls below it within about 4.6 s.
func fastUpdate(rate, n float64, dt, tau time.Duration) float64 {
	if dt <= 0 {
		return rate
	}
	a := math.Exp(-dt.Seconds() / tau.Seconds())
	return rate*a + n/dt.Seconds()*(1-a)
}

// fastMinRate is the rate below which a key is not published: one read in
// ten seconds says nothing about hotness.
const fastMinRate = 0.1

// fastTick updates every counter's fast rate with the reads since the last
// tick and returns this process's FastKeys fastest keys.
func (t *Tracker) fastTick(now time.Time) []Hot {
	t.mu.Lock()
	defer t.mu.Unlock()
	dt := now.Sub(t.lastFast)
	t.lastFast = now
	var out []Hot
	for tenant, s := range t.tenants {
		for _, c := range s.h {
			c.fast = fastUpdate(c.fast, c.fastPending, dt, t.cfg.FastTimeConstant)
			c.fastPending = 0
			if c.fast >= fastMinRate {
				out = append(out, Hot{Tenant: tenant, Item: c.item, Rate: c.fast})
			}
		}
	}
	slices.SortFunc(out, func(a, b Hot) int { return -cmpFloat(a.Rate, b.Rate) })
	if len(out) > t.cfg.FastKeys {
		out = out[:t.cfg.FastKeys]
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// PublishFast updates the fast rates and replaces this process's entries in
// the fast hot set with its fastest keys; they expire after three intervals,
// so a process that stops publishing drops out of the sum.
func (t *Tracker) PublishFast(ctx context.Context) error {
	top := t.fastTick(t.now())
	args := []any{(3 * t.cfg.FastInterval).Milliseconds(), t.id, len(t.published)}
	for _, k := range t.published {
		args = append(args, k)
	}
	next := make([]string, 0, len(top))
	for _, h := range top {
		k := schema.Key(h.Tenant, h.Item)
		next = append(next, k)
		args = append(args, k, strconv.FormatFloat(h.Rate, 'f', 3, 64))
	}
	if err := fastPutScript.Run(ctx, t.rdb, []string{FastKey(t.cfg.Namespace)}, args...).Err(); err != nil {
		t.m.fastPublishes.WithLabelValues("error").Inc()
		return fmt.Errorf("hotset: publish fast rates: %w", err)
	}
	t.published = next
	t.m.fastPublishes.WithLabelValues("ok").Inc()
	return nil
}

// ReadFast returns the n keys of the namespace with the highest fast rate
// summed over every serve process, fastest first.
func ReadFast(ctx context.Context, rdb redis.UniversalClient, ns string, n int) ([]Hot, error) {
	if n < 1 {
		return nil, fmt.Errorf("hotset: fast top %d: must be at least 1", n)
	}
	r, err := fastReadScript.Run(ctx, rdb, []string{FastKey(ns)}).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("hotset: read %s: %w", FastKey(ns), err)
	}
	sum := map[string]float64{}
	for i := 0; i+1 < len(r); i += 2 {
		f, err := strconv.ParseFloat(r[i+1], 64)
		if err != nil {
			return nil, fmt.Errorf("hotset: %s: rate %q of %s", FastKey(ns), r[i+1], r[i])
		}
		sum[r[i]] += f
	}
	out := make([]Hot, 0, len(sum))
	for k, rate := range sum {
		tenant, item, err := schema.ParseKey(k)
		if err != nil {
			continue
		}
		out = append(out, Hot{Tenant: tenant, Item: item, Rate: rate})
	}
	slices.SortFunc(out, func(a, b Hot) int {
		if c := -cmpFloat(a.Rate, b.Rate); c != 0 {
			return c
		}
		return strings.Compare(a.Tenant+"/"+a.Item, b.Tenant+"/"+b.Item)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out, nil
}
