package capture_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// A physical standby (pg_basebackup) is promoted while capture streams
// under write load, the DSN listing both hosts with
// target_session_attrs=read-write. Postgres 15 has no failover slots, so the
// slot is gone on the new primary: capture must find it missing, send a
// reset to every partition (the cache forgets what it cannot vouch for),
// create the slot there and carry on with every later write. Postgres 17+
// keeps capture's failover slot on the standby: capture resumes on it with
// no reset. The log line names the path that ran.
func TestPromotionUnderLoadResets(t *testing.T) {
	t.Parallel()
	primary := testenv.StartPostgres(t)
	dsn := primary.MigratedDatabase(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	// Postgres 17+: the standby keeps a copy of capture's failover slot
	// (sync_replication_slots over its physical slot sb1), and the primary
	// holds logical decoding behind what sb1 confirmed.
	failover := primary.Version() >= 17
	var standby *testenv.Postgres
	if failover {
		standby = testenv.StartStandby(t, primary, "sb1", testenv.PGConf("sync_replication_slots", "on"), testenv.PGConf("hot_standby_feedback", "on"))
		exec(t, connect(t, primary.DSN("postgres")), "ALTER SYSTEM SET synchronized_standby_slots = 'sb1'")
		exec(t, connect(t, primary.DSN("postgres")), "SELECT pg_reload_conf()")
	} else {
		standby = testenv.StartStandby(t, primary, "")
	}
	multi := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=read-write", primary.Port, standby.Port, db)
	k := testenv.StartKafka(t)
	cfg := testConfig(t, multi, k)
	cfg.RetryMax = 500 * time.Millisecond
	r := start(t, cfg)
	r.waitReady(t)

	// Load: one new item every few milliseconds through the same multi-host
	// DSN, reconnecting on failure, as an application would.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	writes := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		var conn *pgx.Conn
		for i := 0; ctx.Err() == nil; i++ {
			if conn == nil {
				c, err := pgx.Connect(ctx, multi)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				conn = c
			}
			if _, err := conn.Exec(ctx, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', $1, 1)", fmt.Sprintf("i%d", i)); err != nil {
				conn.Close(context.Background())
				conn = nil
				continue
			}
			mu.Lock()
			writes++
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	testenv.Eventually(t, 30*time.Second, "load reaches Kafka", func() error {
		mu.Lock()
		n := writes
		mu.Unlock()
		if n < 100 {
			return fmt.Errorf("%d writes", n)
		}
		return nil
	})

	if failover {
		sb := connect(t, standby.DSN(db))
		testenv.Eventually(t, 120*time.Second, "the standby holds a synchronised copy of the slot", func() error {
			// A synced slot stays temporary (dropped at promotion) until the
			// standby has caught up with the primary's copy.
			var synced bool
			if err := sb.QueryRow(context.Background(), "SELECT synced AND NOT temporary FROM pg_replication_slots WHERE slot_name = $1", cfg.Slot).Scan(&synced); err != nil || !synced {
				return fmt.Errorf("slot %s on the standby: synced and persistent %v, err %v", cfg.Slot, synced, err)
			}
			return nil
		})
	}

	primary.Kill()
	promoted := time.Now()
	sc := connect(t, standby.DSN(db))
	exec(t, sc, "SELECT pg_promote(true, 60)")
	if failover {
		exec(t, sc, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'after', 1)")
		waitItem(t, k, cfg.Relay.Topic, "t", "after", 1)
		resumed := time.Since(promoted)
		cancel()
		wg.Wait()
		for _, rec := range readTopic(t, k.Brokers, cfg.Relay.Topic) {
			if rs, ok := rec.ev.(*schema.Reset); ok && rs.Reason != capture.ReasonColdStart {
				t.Fatalf("failover-slot path: capture sent a reset (%s) although the promoted server kept the slot", rs.Reason)
			}
		}
		t.Logf("Postgres %d: failover-slot path: the promoted standby kept slot %s; capture resumed without a reset, a write on the new primary reached Kafka %s after the promotion; %d writes acknowledged",
			standby.Version(), cfg.Slot, resumed.Round(time.Millisecond), writes)
		return
	}
	var resetSeen time.Duration
	testenv.Eventually(t, 120*time.Second, "a slot_missing reset on every partition after the promotion", func() error {
		parts := map[int32]bool{}
		for _, rec := range readTopic(t, k.Brokers, cfg.Relay.Topic) {
			if rs, ok := rec.ev.(*schema.Reset); ok && strings.Contains(rs.Reason, capture.ReasonSlotMissing) {
				parts[rec.partition] = true
			}
		}
		if len(parts) < testPartitions {
			return fmt.Errorf("reset on %d of %d partitions", len(parts), testPartitions)
		}
		resetSeen = time.Since(promoted)
		return nil
	})
	// Writes to the new primary after the reset are all captured.
	exec(t, sc, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'after', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "after", 1)
	cancel()
	wg.Wait()
	var onNew int
	if err := sc.QueryRow(context.Background(), "SELECT count(*) FROM catalog.items").Scan(&onNew); err != nil {
		t.Fatal(err)
	}
	// Asynchronous replication may lose the old primary's last commits
	// (acknowledged, never replayed): that is the database's loss; the reset
	// is what keeps the cache from vouching for anything it read before.
	t.Logf("Postgres %d: reset path: promoted; slot_missing reset on all %d partitions %s after the promotion; %d writes acknowledged, %d rows on the new primary",
		standby.Version(), testPartitions, resetSeen.Round(time.Millisecond), writes, onNew)
}
