package cache_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// The ten interleavings of the cache-tier contract (docs/design.md, "Cache
// tier"), each against standalone Redis and a 3-master Cluster.

// (1) A reader gets a token and reads v41; the v42 invalidation lands; the
// reader's fill of v41 is rejected, and so is v41 with any later token.
func TestFillAfterInvalidationRejected(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		r := lookup(t, c, tn, "item", 0)
		mustStatus(t, r, "miss", true)
		obs := time.Now() // the reader's source read of v41 starts here
		if res, err := c.Invalidate(ctx, tn, "item", 42); err != nil || res != "applied" {
			t.Fatalf("invalidate v42 = %v, %v", res, err)
		}
		mustReject(t, c.Fill(ctx, tn, "item", r.Token, 41, payload(41), obs), "token")
		// A new token does not help a v41 read: the floor is 42.
		r2 := lookup(t, c, tn, "item", 0)
		mustStatus(t, r2, "miss", true)
		mustReject(t, c.Fill(ctx, tn, "item", r2.Token, 41, payload(41), obs), "version")
		if h := hash(t, b, "catalog", tn, "item"); h["floor"] != "42" || h["v"] != "" {
			t.Fatalf("hash after rejected fills = %v", h)
		}
		mustFill(t, c, tn, "item", r2.Token, 42, time.Now())
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 42 {
			t.Fatalf("lookup after fill = %+v", r)
		}

		// Same with a cached value: v41 cached, a reader refreshing it
		// holds a token when v42 lands; its v41 fill is rejected.
		mustFill(t, c, tn, "other", lookup(t, c, tn, "other", 0).Token, 41, time.Now())
		r3 := lookup(t, c, tn, "other", 42) // min_version forces a new read
		mustStatus(t, r3, "miss", true)
		if res, _ := c.Invalidate(ctx, tn, "other", 42); res != "applied" {
			t.Fatalf("invalidate = %v", res)
		}
		mustReject(t, c.Fill(ctx, tn, "other", r3.Token, 41, payload(41), time.Now()), "token")
		s := lookup(t, c, tn, "other", 0)
		if s.Status != "stale" || s.Entry.Version != 41 || !s.Entry.Stale {
			t.Fatalf("lookup of invalidated v41 = %+v, want stale", s)
		}
	})
}

// (2) Out-of-order and duplicate invalidations: v43 then v42 (and v43
// again) leave the floor at 43 and say what they did; with a value cached,
// a late one still revokes it.
func TestOutOfOrderAndDuplicateInvalidations(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		for _, step := range []struct {
			v    int64
			want string
		}{{43, "applied"}, {42, "older"}, {43, "duplicate"}, {41, "older"}} {
			res, err := c.Invalidate(ctx, tn, "item", step.v)
			if err != nil || string(res) != step.want {
				t.Fatalf("invalidate v%d = %v, %v; want %s", step.v, res, err, step.want)
			}
		}
		h := hash(t, b, "catalog", tn, "item")
		if h["floor"] != "43" || h["gen"] != "1" {
			t.Fatalf("hash = %v, want floor 43, gen 1", h)
		}
		r := lookup(t, c, tn, "item", 0)
		mustReject(t, c.Fill(ctx, tn, "item", r.Token, 42, payload(42), time.Now()), "version")
		mustFill(t, c, tn, "item", r.Token, 43, time.Now())
		// An older event after the fill leaves the floor, but it is a change
		// all the same: the value observed before it is revoked, not served
		// again until read anew (docs/design.md, "Freshness watermark").
		if res, _ := c.Invalidate(ctx, tn, "item", 42); res != "revoked" {
			t.Fatalf("late v42 = %v, want revoked", res)
		}
		r = lookup(t, c, tn, "item", 0)
		if r.Status != "stale" || r.Entry.Version != 43 || !r.Entry.Stale {
			t.Fatalf("lookup after late v42 = %+v, want stale v43", r)
		}
		if h := hash(t, b, "catalog", tn, "item"); h["floor"] != "43" || h["gen"] != "2" || h["stale"] != "1" {
			t.Fatalf("hash after late event = %v", h)
		}
		mustFill(t, c, tn, "item", r.Token, 43, time.Now())
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 43 {
			t.Fatalf("lookup after the refill = %+v", r)
		}
	})
}

// (3) Lease expiry: a holder that stalls past the lease loses; a new caller
// gets a new token and fills.
func TestLeaseExpiryTakeover(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		// Long enough that the takeover's own lease outlives the steps
		// between it and its fill on a busy box (with 400 ms the fill
		// was once rejected: token).
		cfg.Lease = 2 * time.Second
		c, ctx, tn := newClient(t, b, cfg), context.Background(), tenant(t)
		a := lookup(t, c, tn, "item", 0)
		mustStatus(t, a, "miss", true)
		mustStatus(t, lookup(t, c, tn, "item", 0), "wait", false)
		time.Sleep(cfg.Lease + 50*time.Millisecond) // the holder stalls
		bb := lookup(t, c, tn, "item", 0)
		mustStatus(t, bb, "miss", true)
		if bb.Token == a.Token {
			t.Fatal("takeover reused the stalled token")
		}
		mustReject(t, c.Fill(ctx, tn, "item", a.Token, 7, payload(7), time.Now()), "token")
		mustFill(t, c, tn, "item", bb.Token, 7, time.Now())
		if r := lookup(t, c, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 7 {
			t.Fatalf("lookup = %+v", r)
		}
	})
}

// (4) Redis restart (data lost): the old token is useless, the key is not
// recreated by it, and a token issued before a restart that brought the data
// back (here: restored from a dump) is useless too (run_id binding).
func TestRestartOldTokensUseless(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		key := schema.RedisKey("catalog", tn, "item")
		a := lookup(t, c, tn, "item", 0)
		mustStatus(t, a, "miss", true)
		b.restartNodeOf(t, key)
		mustReject(t, c.Fill(ctx, tn, "item", a.Token, 5, payload(5), time.Now()), "token")
		if n := b.rdb.Exists(ctx, key).Val(); n != 0 {
			t.Fatal("a rejected fill recreated the key")
		}

		// Data survives the restart (persistence), the lease is still
		// within its lifetime: the token must still not fill.
		bb := lookup(t, c, tn, "item", 0)
		mustStatus(t, bb, "miss", true)
		dump, err := b.rdb.Dump(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		b.restartNodeOf(t, key)
		if err := b.rdb.RestoreReplace(ctx, key, 0, dump).Err(); err != nil {
			t.Fatal(err)
		}
		mustReject(t, c.Fill(ctx, tn, "item", bb.Token, 5, payload(5), time.Now()), "token")
		// Nobody waits for the dead lease: the next caller gets a token.
		r := lookup(t, c, tn, "item", 0)
		mustStatus(t, r, "miss", true)
		mustFill(t, c, tn, "item", r.Token, 5, time.Now())
	})
}

// (5) Route change: a token from before cannot fill after a namespace switch,
// nor after the key moved to another server (Cluster: its slot migrated with
// the data; standalone: the hash copied to another server).
func TestRouteChangeOldTokenCannotFill(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		// The lease outlives the test: its token is refused for the route,
		// not because it expired (400 ms did, on a loaded box, before the
		// hash could be copied: "redis: nil").
		cfg.Lease, cfg.MaxAge = time.Minute, 2*time.Minute
		c, ctx, tn := newClient(t, b, cfg), context.Background(), tenant(t)
		r := lookup(t, c, tn, "item", 0)
		mustStatus(t, r, "miss", true)
		cfg2 := cfg
		cfg2.Namespace = "catalog2"
		c2 := newClient(t, b, cfg2)
		mustReject(t, c2.Fill(ctx, tn, "item", r.Token, 5, payload(5), time.Now()), "token")
		mustStatus(t, lookup(t, c2, tn, "item", 0), "miss", true) // the new namespace starts cold

		key := schema.RedisKey("catalog", tn, "item")
		moved := c
		if b.cluster != nil {
			b.moveSlotOf(t, key)
		} else {
			other := testenv.StartRedis(t)
			dump, err := b.rdb.Dump(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			oc := other.Client(t)
			if err := oc.RestoreReplace(ctx, key, 0, dump).Err(); err != nil {
				t.Fatal(err)
			}
			moved = newClient(t, &backend{rdb: oc, single: other}, cfg)
		}
		if b.cluster != nil {
			// The client may still be learning the slot's new owner: read
			// until an answer, so an error is not taken for a lost token.
			testenv.Eventually(t, 10*time.Second, "the migrated hash's token (redis: nil: the test would prove nothing)", func() error {
				return b.rdb.HGet(ctx, key, "tok").Err()
			})
		}
		mustReject(t, moved.Fill(ctx, tn, "item", r.Token, 5, payload(5), time.Now()), "token")
		r2 := lookup(t, moved, tn, "item", 0)
		mustStatus(t, r2, "miss", true)
		mustFill(t, moved, tn, "item", r2.Token, 5, time.Now())
		if r := lookup(t, moved, tn, "item", 0); r.Status != "hit" || r.Entry.Version != 5 {
			t.Fatalf("lookup on the new route = %+v", r)
		}
	})
}

// (6) Metadata eviction: after the hash is deleted, an old token cannot
// revive it, and the next token is a different one.
func TestMetadataEvictionNoRevive(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		key := schema.RedisKey("catalog", tn, "item")
		mustFill(t, c, tn, "item", lookup(t, c, tn, "item", 0).Token, 5, time.Now())
		if res, _ := c.Invalidate(ctx, tn, "item", 6); res != "applied" {
			t.Fatal(res)
		}
		old := lookup(t, c, tn, "item", 0) // stale v5, refresh token
		mustStatus(t, old, "stale", true)
		if err := b.rdb.Del(ctx, key).Err(); err != nil { // eviction
			t.Fatal(err)
		}
		mustReject(t, c.Fill(ctx, tn, "item", old.Token, 6, payload(6), time.Now()), "token")
		if n := b.rdb.Exists(ctx, key).Val(); n != 0 {
			t.Fatal("an old token recreated the evicted key")
		}
		nw := lookup(t, c, tn, "item", 0)
		mustStatus(t, nw, "miss", true)
		if nw.Token == old.Token {
			t.Fatal("token reused after eviction")
		}
		mustReject(t, c.Fill(ctx, tn, "item", old.Token, 6, payload(6), time.Now()), "token")
		mustFill(t, c, tn, "item", nw.Token, 6, time.Now())

		// Purge (the applier's hard delete) is the same: old tokens die.
		held := lookup(t, c, tn, "purged", 0)
		if err := c.Purge(ctx, tn, "purged"); err != nil {
			t.Fatal(err)
		}
		mustReject(t, c.Fill(ctx, tn, "purged", held.Token, 1, payload(1), time.Now()), "token")
		if n := b.rdb.Exists(ctx, schema.RedisKey("catalog", tn, "purged")).Val(); n != 0 {
			t.Fatal("an old token recreated a purged key")
		}
	})
}

// (7) Hard deadline inherited: the deadline comes from the source read's
// start; refilling the same read never resets it; at/after hard it is never
// a hit (nor stale).
func TestHardDeadlineInherited(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		cfg := testConfig()
		c, ctx, tn := newClient(t, b, cfg), context.Background(), tenant(t)
		obs := time.Now().Add(-cfg.HardLifetime + 400*time.Millisecond) // a slow source read
		r := lookup(t, c, tn, "item", 0)
		mustFill(t, c, tn, "item", r.Token, 5, obs)
		got := lookup(t, c, tn, "item", 0)
		if got.Status == "miss" || got.Status == "wait" {
			t.Fatalf("lookup right after fill = %+v", got)
		}
		if want := time.UnixMilli(obs.UnixMilli()).Add(cfg.HardLifetime); !got.Entry.Hard.Equal(want) || !got.Entry.Obs.Equal(time.UnixMilli(obs.UnixMilli())) {
			t.Fatalf("hard = %v, obs = %v; want hard %v from obs", got.Entry.Hard, got.Entry.Obs, want)
		}
		deadline := got.Entry.Hard
		for time.Now().Before(deadline.Add(100 * time.Millisecond)) {
			before := time.Now()
			g := lookup(t, c, tn, "item", 0)
			if (g.Status == "hit" || g.Status == "stale") && !before.Before(deadline) {
				t.Fatalf("served %s at %v, at/after hard %v", g.Status, before, deadline)
			}
			time.Sleep(20 * time.Millisecond)
		}
		r2 := acquire(t, c, tn, "item") // once the loop's refresh lease lapses
		mustStatus(t, r2, "miss", true)
		// Copying the old read again (new token, same obs) must not
		// resurrect it.
		mustReject(t, c.Fill(ctx, tn, "item", r2.Token, 5, payload(5), obs), "expired")
		mustFill(t, c, tn, "item", r2.Token, 5, time.Now())
	})
}

// (8) A successful fill's token cannot fill again (a retried fill after a
// lost reply is rejected harmlessly).
func TestUsedTokenCannotFillAgain(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		r := lookup(t, c, tn, "item", 0)
		mustFill(t, c, tn, "item", r.Token, 5, time.Now())
		before := hash(t, b, "catalog", tn, "item")
		mustReject(t, c.Fill(ctx, tn, "item", r.Token, 5, payload(5), time.Now()), "token")
		mustReject(t, c.Fill(ctx, tn, "item", r.Token, 6, payload(6), time.Now()), "token")
		if after := hash(t, b, "catalog", tn, "item"); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("rejected fill changed the hash:\n%v\n%v", before, after)
		}
	})
}

// (9) Waiters see the filled value on their next lookup; none of them gets
// a token while the lease is held.
func TestWaitersSeeFilledValue(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, tn := newClient(t, b, testConfig()), tenant(t)
		holder := lookup(t, c, tn, "item", 0)
		mustStatus(t, holder, "miss", true)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				deadline := time.Now().Add(5 * time.Second)
				for time.Now().Before(deadline) {
					r, err := c.Lookup(context.Background(), tn, "item", 0)
					if err != nil {
						errs <- err
						return
					}
					switch {
					case !r.Token.IsZero():
						errs <- fmt.Errorf("a waiter got a token (%s) while the lease was held", r.Status)
						return
					case r.Status == "hit":
						if r.Entry.Version != 5 || string(r.Entry.Payload) != string(payload(5)) {
							errs <- fmt.Errorf("waiter saw %+v", r.Entry)
						}
						return
					case r.Status != "wait":
						errs <- fmt.Errorf("waiter got %s", r.Status)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				errs <- fmt.Errorf("waiter never saw the value")
			}()
		}
		time.Sleep(100 * time.Millisecond) // let the waiters wait
		mustFill(t, c, tn, "item", holder.Token, 5, time.Now())
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// (10) Tenant A's item never answers tenant B's lookup of the same item id,
// including ids that would collide if keys were joined naively.
func TestTenantIsolation(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		a, bt := tn+"-a", tn+"-b"
		mustFill(t, c, a, "item", lookup(t, c, a, "item", 0).Token, 5, time.Now())
		mustStatus(t, lookup(t, c, bt, "item", 0), "miss", true)
		// "x/y" + "z" versus "x" + "y/z".
		mustFill(t, c, a+"/y", "z", lookup(t, c, a+"/y", "z", 0).Token, 9, time.Now())
		mustStatus(t, lookup(t, c, a, "y/z", 0), "miss", true)
		// B's invalidation does not touch A.
		if res, _ := c.Invalidate(ctx, bt, "item", 100); res != "applied" {
			t.Fatal(res)
		}
		if r := lookup(t, c, a, "item", 0); r.Status != "hit" || r.Entry.Version != 5 {
			t.Fatalf("A after B's invalidation = %+v", r)
		}
	})
}
