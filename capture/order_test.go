package capture_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// Random concurrent transactions, a fifth of them rolled back: every
// committed (tenant, item, version) reaches the topic on its murmur2
// partition, in version order per key, and no rolled-back transaction's
// change appears.
func TestOrderAndCompleteness(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	r := start(t, cfg)
	r.waitReady(t)

	const keys, workers, txnsPerWorker = 150, 4, 150
	setup := connect(t, dsn)
	exec(t, setup, `INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 't' || (i % 5), 'item ' || i, 1, '{}' FROM generate_series(0, $1 - 1) i`, keys)

	var (
		mu         sync.Mutex
		committed  = []kv{}
		rolledBack = map[uint32]bool{}
		wg         sync.WaitGroup
	)
	for i := 0; i < keys; i++ {
		committed = append(committed, kv{schema.Key(fmt.Sprintf("t%d", i%5), fmt.Sprintf("item %d", i)), 1})
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := connect(t, dsn)
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			ctx := context.Background()
			for range txnsPerWorker {
				tx, err := conn.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				var xid int64
				if err := tx.QueryRow(ctx, "SELECT txid_current()").Scan(&xid); err != nil {
					t.Error(err)
					return
				}
				var mine []kv
				// Lock keys in index order: no deadlocks between workers.
				idx := map[int]bool{}
				for range 1 + rng.IntN(5) {
					idx[rng.IntN(keys)] = true
				}
				for _, i := range slices.Sorted(maps.Keys(idx)) {
					state := "active"
					if rng.IntN(20) == 0 {
						state = "deleted"
					}
					var v int64
					err := tx.QueryRow(ctx, `UPDATE catalog.items SET version = version + 1, state = $3, updated_at = now()
						WHERE tenant_id = $1 AND item_id = $2 RETURNING version`, fmt.Sprintf("t%d", i%5), fmt.Sprintf("item %d", i), state).Scan(&v)
					if err != nil {
						t.Error(err)
						tx.Rollback(ctx)
						return
					}
					mine = append(mine, kv{schema.Key(fmt.Sprintf("t%d", i%5), fmt.Sprintf("item %d", i)), v})
				}
				if rng.IntN(5) == 0 {
					tx.Rollback(ctx)
					mu.Lock()
					rolledBack[uint32(xid)] = true
					mu.Unlock()
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				committed = append(committed, mine...)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	var recs []record
	testenv.Eventually(t, 90*time.Second, "every committed version in the topic", func() error {
		recs = readTopic(t, k.Brokers, cfg.Relay.Topic)
		return joinErr(missing(recs, committed))
	})
	resolvedSeen := map[int32]bool{}
	for _, rec := range recs {
		switch ev := rec.ev.(type) {
		case *schema.Change:
			if rolledBack[ev.Xid] {
				t.Fatalf("change of rolled-back xid %d in the topic: %+v", ev.Xid, ev)
			}
			if want := keyPartition(rec.key, testPartitions); rec.partition != want {
				t.Fatalf("key %q on partition %d, murmur2 says %d", rec.key, rec.partition, want)
			}
			if rec.key != ev.Key() {
				t.Fatalf("record key %q, event key %q", rec.key, ev.Key())
			}
		case *schema.Resolved:
			if p, ok := schema.ParseMarkerKey(rec.key); !ok || p != rec.partition {
				t.Fatalf("resolved marker key %q on partition %d", rec.key, rec.partition)
			}
			resolvedSeen[rec.partition] = true
		}
	}
	for key, list := range changesByKey(recs) {
		for i := 1; i < len(list); i++ {
			a, b := list[i-1].ev.(*schema.Change), list[i].ev.(*schema.Change)
			if b.Version <= a.Version {
				t.Fatalf("key %s: version %d after %d (offsets %d, %d)", key, b.Version, a.Version, list[i-1].offset, list[i].offset)
			}
		}
	}
	if len(resolvedSeen) != testPartitions {
		t.Fatalf("resolved markers on %d partitions, want %d", len(resolvedSeen), testPartitions)
	}
	t.Logf("%d committed versions, %d rolled-back transactions, %d records", len(committed), len(rolledBack), len(recs))
}
