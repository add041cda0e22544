package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// flushScripts empties the script cache of every master, as a restart would.
func flushScripts(t *testing.T, b *backend) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch r := b.rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
	default:
		err = r.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// A batch spread over every node reports applied/duplicate/older per key in
// order, keeps a per-key error to its key, and survives NOSCRIPT inside the
// pipeline (scripts flushed) by loading them and re-running the affected
// commands.
func TestInvalidateBatch(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx, tn := context.Background(), tenant(t)
		reg := prometheus.NewRegistry()
		c, err := cache.New(testConfig(), cache.Deps{Redis: b.rdb, Log: testenv.Logger(t), Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		flushScripts(t, b) // nothing loaded: the first pipeline hits NOSCRIPT
		var batch []cache.Invalidation
		for i := 0; i < 300; i++ {
			batch = append(batch, cache.Invalidation{Tenant: tn, Item: fmt.Sprint("item", i), Version: 10})
		}
		batch = append(batch,
			cache.Invalidation{Tenant: tn, Item: "item0", Version: 10}, // duplicate within the batch
			cache.Invalidation{Tenant: tn, Item: "item1", Version: 9},  // older
			cache.Invalidation{Tenant: tn, Item: "item2", Version: 11}, // applied again
			cache.Invalidation{Tenant: tn, Item: "wrong", Version: 1},
		)
		if err := b.rdb.Set(ctx, schema.RedisKey("catalog", tn, "wrong"), "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		out, err := c.InvalidateBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != len(batch) {
			t.Fatalf("%d outcomes for %d invalidations", len(out), len(batch))
		}
		for i := 0; i < 300; i++ {
			if out[i].Result != cache.InvalidateApplied || out[i].Err != nil {
				t.Fatalf("outcome[%d] = %+v", i, out[i])
			}
		}
		want := []cache.InvalidateResult{cache.InvalidateDuplicate, cache.InvalidateOlder, cache.InvalidateApplied}
		for j, w := range want {
			if o := out[300+j]; o.Result != w || o.Err != nil {
				t.Fatalf("outcome[%d] = %+v, want %s", 300+j, o, w)
			}
		}
		if o := out[303]; o.Err == nil || !strings.Contains(o.Err.Error(), "WRONGTYPE") {
			t.Fatalf("outcome for a non-hash key = %+v, want WRONGTYPE", o)
		}
		if h := hash(t, b, "catalog", tn, "item2"); h["floor"] != "11" || h["gen"] != "2" {
			t.Fatalf("item2 hash = %v", h)
		}
		if got := testenv.Metric(t, reg, "tidemark_cache_invalidations_total", "result", "applied"); got != 301 {
			t.Fatalf("applied counter = %v, want 301", got)
		}
		// Retrying the whole batch is harmless: nothing is applied twice.
		out, err = c.InvalidateBatch(ctx, batch[:300])
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range out {
			if o.Result != cache.InvalidateDuplicate && !(i == 2 && o.Result == cache.InvalidateOlder) {
				t.Fatalf("retry outcome[%d] = %+v", i, o)
			}
		}
		// A connection failure fails the batch as a whole.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := c.InvalidateBatch(cctx, batch[:10]); err == nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("batch on a cancelled context: %v", err)
		}
	})
}

// Every call recovers from a server that lost its scripts.
func TestNoScriptRecovery(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		flushScripts(t, b)
		r := lookup(t, c, tn, "item", 0)
		flushScripts(t, b)
		mustFill(t, c, tn, "item", r.Token, 3, time.Now())
		flushScripts(t, b)
		if res, err := c.Invalidate(ctx, tn, "item", 4); err != nil || res != "applied" {
			t.Fatal(res, err)
		}
		flushScripts(t, b)
		if err := c.SetWatermark(ctx, 0, time.Now()); err != nil {
			t.Fatal(err)
		}
	})
}

// ServerIdentity changes when a master restarts and is stable otherwise.
func TestServerIdentityChangesOnRestart(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx := newClient(t, b, testConfig()), context.Background()
		id1, err := c.ServerIdentity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(id1, ",") + 1; b.cluster != nil && n != 3 {
			t.Fatalf("identity %q names %d masters, want 3", id1, n)
		}
		if id, _ := c.ServerIdentity(ctx); id != id1 {
			t.Fatalf("identity changed without a restart: %q -> %q", id1, id)
		}
		b.restartNodeOf(t, "anything")
		testenv.Eventually(t, 10*time.Second, "identity after restart", func() error {
			id2, err := c.ServerIdentity(ctx)
			if err != nil {
				return err
			}
			if id2 == id1 {
				return fmt.Errorf("identity unchanged: %q", id2)
			}
			return nil
		})
	})
}
