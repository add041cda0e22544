package reader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
)

// publishHot builds three copies of acme's item hot from its primary through
// builder (the hot-key builder's part), reading it with rd until the primary
// is fresh enough to copy.
func publishHot(t *testing.T, ctx context.Context, builder *cache.Client, rd *Reader) cache.Manifest {
	t.Helper()
	var m cache.Manifest
	testenv.Eventually(t, 10*time.Second, "a replica set of hot", func() error {
		snap, err := builder.ReplicaSource(ctx, "acme", "hot", time.Second, 0)
		if err != nil {
			return err
		}
		if snap.Status != "ok" {
			rd.Get(ctx, Query{Tenant: "acme", Item: "hot"}) // refresh the primary
			return errors.New("replica source: " + snap.Status)
		}
		m, err = builder.BuildReplicas(ctx, "acme", "hot", snap.Entry, 3)
		return err
	})
	return m
}

// A hot key with published copies is answered from them (L1 off), never at
// or after a copy's deadline; a batch read of it reads its copy too; and
// once an INVALIDATE of a newer version has returned, it is never answered
// with the old version from a copy after the manifest lifetime. api's
// TestHotKeyReplicaAnswerOverHTTP maps such an answer to HTTP.
func TestHotKeyReplicasServeWithinDeadlineAndInvalidation(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	soft := 2 * time.Second
	ccfg := func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime, c.Lease = soft, soft, 4*time.Second, 300*time.Millisecond
	}
	src := newMemSource()
	src.set("acme", "hot", 1, `"one"`)
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size = 0 }, ccfg)
	builder := newTestCache(t, rdb, ccfg)
	ctx := testenv.Context(t, 60*time.Second)
	hot := func(spread uint64) Query { return Query{Tenant: "acme", Item: "hot", Spread: spread} }
	if r := getAdmitted(t, rd, hot(0)); r.Kind != Found {
		t.Fatalf("cold Get: %d %q", r.Kind, r.CacheStatus)
	}
	m := publishHot(t, ctx, builder, rd)

	// Served from copies until their deadline, then from the primary path.
	// late starts reading 250 ms before the deadline: the manifest its
	// first lookup gives is held for less than its 500 ms lifetime, never
	// past the copies' deadline.
	late := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size = 0 }, ccfg)
	replicaReads := 0
	for i := uint64(0); time.Now().Before(m.Soft.Add(500 * time.Millisecond)); i++ {
		readers := []*Reader{rd}
		if time.Until(m.Soft) < 250*time.Millisecond {
			readers = append(readers, late)
		}
		for _, rd := range readers {
			r := rd.Get(ctx, hot(i))
			got := time.Now()
			if r.Kind != Found || r.Version != 1 {
				t.Fatalf("Get: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
			}
			if strings.Contains(r.CacheStatus, "detail=replica") {
				replicaReads++
				if !got.Before(m.Soft.Add(20 * time.Millisecond)) {
					t.Fatalf("a copy answered at %s, its deadline was %s", got.Format(time.StampMilli), m.Soft.Format(time.StampMilli))
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if replicaReads == 0 {
		t.Fatal("no Get was answered from a copy")
	}

	// A fresh value and a fresh set.
	publishHot(t, ctx, builder, rd)
	testenv.Eventually(t, 5*time.Second, "a Get from a copy", func() error {
		if r := rd.Get(ctx, hot(1)); !strings.Contains(r.CacheStatus, "detail=replica") {
			return errors.New("Get: " + r.CacheStatus)
		}
		return nil
	})
	// A batch read of the hot key reads its copy too (Get's path), the
	// other item its primary.
	src.set("acme", "cool", 1, `"c"`)
	testenv.Eventually(t, 5*time.Second, "a batch read of the hot key from a copy", func() error {
		rs := rd.GetMany(ctx, "acme", []string{"hot", "cool"}, 1)
		h, c := rs[0], rs[1]
		if strings.Contains(c.CacheStatus, "replica") {
			t.Fatalf("batch: the item without copies answered from a copy: %q", c.CacheStatus)
		}
		if c.Kind != Found || c.Version != 1 {
			return fmt.Errorf("batch: the item without copies: %d version %d %q", c.Kind, c.Version, c.CacheStatus)
		}
		if h.Kind != Found || h.Version != 1 || !strings.Contains(h.CacheStatus, "detail=replica") {
			return fmt.Errorf("batch: the hot key: %d version %d %q", h.Kind, h.Version, h.CacheStatus)
		}
		return nil
	})

	// v2 is committed and applied: after the manifest lifetime no copy
	// answers v1.
	src.set("acme", "hot", 2, `"two"`)
	if _, err := builder.Invalidate(ctx, "acme", "hot", 2); err != nil {
		t.Fatal(err)
	}
	invalidated := time.Now()
	for i := uint64(0); time.Since(invalidated) < time.Second; i++ {
		sent := time.Now()
		r := rd.Get(ctx, hot(i))
		if r.Kind == Found && r.Version == 1 && strings.Contains(r.CacheStatus, "detail=replica") &&
			sent.After(invalidated.Add(DefaultConfig().ReplicaManifestTTL+20*time.Millisecond)) {
			t.Fatalf("Get sent %s after INVALIDATE v2 returned answered v1 from a copy", sent.Sub(invalidated))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := getAdmitted(t, rd, hot(0)); r.Kind != Found || r.Version != 2 {
		t.Fatalf("Get after the invalidation: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
	}
}

// Hot-key replica reads share the primary path's in-process coalescing and
// L1. With L1 off (serve's default --l1-ttl 0): eight reads of one key that
// arrive while Redis is paused (CLIENT PAUSE, so every one of them is in
// flight at once, however loaded the box) cost Redis one resolution for a
// key with copies, as for a key without: one copy read, not eight. Logged:
// Redis commands per burst (INFO commandstats) with replicas on and off.
// With L1 on: a copy's answer is offered to L1 as a primary hit is, so a
// copy read can admit the key and the next read is L1's.
func TestHotKeyReplicaReadsShareL1AndCoalescing(t *testing.T) {
	rdb := testenv.StartRedis(t).Client(t)
	ccfg := func(c *cache.Config) {
		c.SoftMin, c.SoftMax, c.HardLifetime = 15*time.Second, 15*time.Second, 25*time.Second
	}
	src := newMemSource()
	src.set("acme", "hot", 1, `"one"`)
	src.set("acme", "twin", 1, `"one"`)
	// Reads outlast the pause below.
	rd := newTestReaderOf(t, rdb, src, func(c *Config) { c.L1Size, c.RequestTimeout, c.LookupTimeout = 0, 10*time.Second, 5*time.Second }, ccfg)
	builder := newTestCache(t, rdb, ccfg)
	ctx := testenv.Context(t, 90*time.Second)
	for _, id := range []string{"hot", "twin"} {
		if r := getAdmitted(t, rd, Query{Tenant: "acme", Item: id}); r.Kind != Found {
			t.Fatalf("cold Get %s: %d %q", id, r.Kind, r.CacheStatus)
		}
	}
	publishHot(t, ctx, builder, rd)
	commands := func() int64 {
		info, err := rdb.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, l := range strings.Split(info, "\r\n") {
			if _, stats, ok := strings.Cut(l, ":calls="); ok {
				c, _ := strconv.ParseInt(stats[:strings.IndexByte(stats, ',')], 10, 64)
				n += c
			}
		}
		return n
	}
	const workers, pause = 8, time.Second
	// burst sends workers Gets of id while Redis is paused and reports the
	// Redis commands they cost, their answers, and whether all of them
	// were in flight before the pause ended (else the burst proves nothing).
	burst := func(id, want string) (cmds int64, status map[string]int, together bool) {
		testenv.Eventually(t, 10*time.Second, "a Get of "+id+" answered "+want, func() error {
			if r := rd.Get(ctx, Query{Tenant: "acme", Item: id}); !strings.Contains(r.CacheStatus, want) {
				return errors.New("Get: " + r.CacheStatus)
			}
			return nil
		})
		before := commands()
		paused := time.Now()
		if err := rdb.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		status = map[string]int{}
		var mu sync.Mutex
		var started sync.WaitGroup
		var wg sync.WaitGroup
		started.Add(workers)
		for w := range workers {
			wg.Go(func() {
				started.Done()
				r := rd.Get(ctx, Query{Tenant: "acme", Item: id, Spread: uint64(w)})
				if r.Kind != Found {
					t.Errorf("Get %s: %d %q", id, r.Kind, r.CacheStatus)
				}
				mu.Lock()
				status[r.CacheStatus]++
				mu.Unlock()
			})
		}
		started.Wait()
		// Every Get has entered Get well inside the pause: none can have
		// been answered before the others asked.
		together = time.Since(paused) < pause/2
		wg.Wait()
		// Less the INFO before and the CLIENT PAUSE.
		return commands() - before - 2, status, together && status[want+"; collapsed"]+status[want] == workers
	}
	var off, on int64
	var offStatus, onStatus map[string]int
	for attempt := 1; ; attempt++ {
		var okOff, okOn bool
		off, offStatus, okOff = burst("twin", "tidemark; hit")
		on, onStatus, okOn = burst("hot", "tidemark; hit; detail=replica")
		t.Logf("Redis commands for %d Gets of one key sent while Redis is paused: replicas off %d %v, on %d %v", workers, off, offStatus, on, onStatus)
		if okOff && okOn {
			break
		}
		if attempt == 5 {
			t.Fatalf("in 5 bursts the Gets of a key were never all in flight at once with every answer from its path: " +
				"the box stalls for half a second at a time, or reads of a key with copies do not share one resolution")
		}
	}
	if on > off+1 || on >= workers {
		t.Fatalf("Redis commands for %d Gets in flight at once with replicas on %d, off %d: copy reads bypass the per-key coalescing (on: %v)", workers, on, off, onStatus)
	}

	// L1 on: a fresh reader's first read of the key is a primary hit that
	// teaches it the manifest (L1 has seen the key once); its next is a copy
	// read, which admits the key to L1 when offered to it. Were copies
	// kept out of L1, only the next primary hit (once the manifest's
	// lifetime is over) would admit it: no copy read is followed by L1.
	withL1 := newTestReaderOf(t, rdb, src, nil, ccfg)
	// Reads 5 ms apart, well within the 500 ms manifest and L1 lifetimes.
	var seen []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r := withL1.Get(ctx, Query{Tenant: "acme", Item: "hot"})
		if r.Kind != Found || r.Version != 1 {
			t.Fatalf("Get with L1 on: %d version %d %q", r.Kind, r.Version, r.CacheStatus)
		}
		seen = append(seen, r.CacheStatus)
		if n := len(seen); n >= 2 && strings.Contains(seen[n-2], "detail=replica") && r.CacheStatus == "tidemark; hit; detail=l1" {
			break
		}
		if time.Now().After(deadline) {
			count := map[string]int{}
			for _, st := range seen {
				count[st]++
			}
			t.Fatalf("with L1 on, no copy read was followed by an L1 answer in 20 s: a copy's answer is not offered to L1 (answers %v, the first %q)",
				count, seen[:min(len(seen), 8)])
		}
	}
}
