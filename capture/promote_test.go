package capture_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"tidemark/capture"
	"tidemark/lab/testenv"
	"tidemark/schema"
)

// A physical standby (pg_basebackup) is promoted while capture streams
// under write load, the DSN listing both hosts with
// target_session_attrs=read-write. Postgres 15 has no failover slots, so the
// slot is gone on the new primary: capture must find it missing, send a
// reset to every partition (the cache forgets what it cannot vouch for),
// create the slot there and carry on with every later write.
func TestPromotionUnderLoadResets(t *testing.T) {
	t.Parallel()
	primary := testenv.StartPostgres(t)
	dsn := primary.MigratedDatabase(t)
	db := dsn[strings.LastIndex(dsn, "/")+1 : strings.Index(dsn, "?")]
	standby := testenv.StartStandby(t, primary, "")
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

	primary.Kill()
	promoted := time.Now()
	sc := connect(t, standby.DSN(db))
	exec(t, sc, "SELECT pg_promote(true, 60)")
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
	t.Logf("Postgres %d: promoted; slot_missing reset on all %d partitions %s after the promotion; %d writes acknowledged, %d rows on the new primary",
		standby.Version(), testPartitions, resetSeen.Round(time.Millisecond), writes, onNew)
}
