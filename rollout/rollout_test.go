package rollout

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A ramp routes the same items through the cache every time, and about its
// share of them.
func TestRouteIsStableAndProportional(t *testing.T) {
	for _, ramp := range []float64{0, 1, 10, 50, 100} {
		st := Setting{Mode: ModeCache, Ramp: ramp}
		cached := 0
		const n = 20000
		for i := range n {
			item := fmt.Sprintf("item-%d", i)
			r := st.Route("acme", item)
			if r2 := st.Route("acme", item); r2 != r {
				t.Fatalf("ramp %g: item %s routed %s then %s", ramp, item, r, r2)
			}
			if r == ModeCache {
				cached++
			}
		}
		got := 100 * float64(cached) / n
		if got < ramp-1 || got > ramp+1 {
			t.Fatalf("ramp %g%%: %.2f%% of items routed through the cache", ramp, got)
		}
		// A raise keeps every item that was cached cached.
		if ramp < 100 {
			up := Setting{Mode: ModeCache, Ramp: ramp + 5}
			for i := range 2000 {
				item := fmt.Sprintf("item-%d", i)
				if st.Route("acme", item) == ModeCache && up.Route("acme", item) != ModeCache {
					t.Fatalf("raising %g%% to %g%% moved item %s back to the source", ramp, ramp+5, item)
				}
			}
		}
	}
	if (Setting{Mode: ModeShadow}).Route("acme", "x") != ModeShadow || (Setting{Mode: ModeSource, Ramp: 100}).Route("acme", "x") != ModeSource {
		t.Fatal("shadow and source settings must route every read alike")
	}
}

// The store remembers the safe step of a raise, halts back to it, refuses a
// raise of a halted tenant unless forced, and restarts the shadow counts of
// a changed tenant.
func TestStoreSafeStepHaltAndCounts(t *testing.T) {
	r := testenv.StartRedis(t)
	rdb, err := cache.ParseRedisURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx := testenv.Context(t, 30*time.Second)
	s := NewStore(rdb, "catalog")
	now := time.Unix(1_800_000_000, 0)

	ss, written, err := s.Load(ctx)
	if err != nil || written || len(ss) != 0 || ss.For("acme", Default) != Default {
		t.Fatalf("empty store: %v %v %v", ss, written, err)
	}
	if _, err := s.Set(ctx, "acme", ModeSource, 0, false, now); err != nil {
		t.Fatal(err)
	}
	for _, ramp := range []float64{0, 1, 10} {
		if _, err := s.Set(ctx, "acme", ModeCache, ramp, false, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Record(ctx, map[string]Counts{"acme": {OutcomeMatch: 5, OutcomeOlder: 3}}); err != nil {
		t.Fatal(err)
	}
	ss, written, _ = s.Load(ctx)
	got := ss["acme"]
	if !written || got.Mode != ModeCache || got.Ramp != 10 || got.Safe != 1 {
		t.Fatalf("after 0 -> 1 -> 10: %+v (written %v), want cache 10%% with safe step 1%%", got, written)
	}
	if ok, err := s.Halt(ctx, "acme", Setting{Mode: ModeCache, Ramp: 10, Safe: 5}, "stale view", now); ok || err != nil {
		t.Fatalf("a halt from a stale view of the setting must not apply: %v %v", ok, err)
	}
	if ok, err := s.Halt(ctx, "acme", got, "3 of 8 mismatched", now); !ok || err != nil {
		t.Fatalf("halt: %v %v", ok, err)
	}
	ss, _, _ = s.Load(ctx)
	if h := ss["acme"]; h.Ramp != 1 || h.Halted == "" {
		t.Fatalf("after the halt: %+v, want back at 1%% and halted", h)
	}
	if _, err := s.Set(ctx, "acme", ModeCache, 50, false, now); !errors.Is(err, ErrHalted) {
		t.Fatalf("raising a halted ramp without force: %v, want ErrHalted", err)
	}
	if st, err := s.Set(ctx, "acme", ModeCache, 50, true, now); err != nil || st.Halted != "" || st.Safe != 1 {
		t.Fatalf("forced raise: %+v %v", st, err)
	}
	sh, err := s.Shadow(ctx)
	if err != nil || sh["acme"].Total() != 0 {
		t.Fatalf("shadow counts must restart with each change: %v %v", sh, err)
	}
	if _, err := s.Set(ctx, AllTenants, ModeSource, 0, false, now); err != nil {
		t.Fatal(err)
	}
	ss, _, _ = s.Load(ctx)
	if ss.For("other", Default).Mode != ModeSource || ss.For("acme", Default).Mode != ModeCache {
		t.Fatalf("all-tenants setting: other %+v, acme %+v", ss.For("other", Default), ss.For("acme", Default))
	}
}
