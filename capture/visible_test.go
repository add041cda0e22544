package capture_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// startSlowChecks runs a capture whose every visibility snapshot takes
// delay longer (a Postgres far away), until the test ends, and waits until
// it streams.
func startSlowChecks(t *testing.T, cfg capture.Config, delay time.Duration) *running {
	t.Helper()
	r := startWith(t, cfg, capture.Deps{}, func(c *capture.Capture) { capture.SlowVisibilityChecks(c, delay) })
	r.waitReady(t)
	return r
}

// The visibility check is off the stream's path: with every snapshot query
// taking 100 ms (a Postgres far away), back-to-back single-row commits, each
// newer than the last snapshot, still reach Kafka right behind the last
// commit, and one snapshot answers for every transaction decoded while the
// previous one was asked. A stream that waited on a query per transaction
// would take 100 ms per commit and one query each.
func TestVisibilityCheckOffTheStreamPath(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	const delay = 100 * time.Millisecond
	reg := startSlowChecks(t, cfg, delay).reg

	conn := connect(t, dsn)
	const n = 200
	before := testenv.Metric(t, reg, "tidemark_capture_visibility_checks_total")
	var committed []kv
	first := time.Now()
	for i := range n {
		exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', $1, 1)", fmt.Sprintf("i%d", i))
		committed = append(committed, kv{schema.Key("t", fmt.Sprintf("i%d", i)), 1})
	}
	last := time.Now()
	testenv.Eventually(t, 60*time.Second, "every commit in the topic", func() error {
		return joinErr(missing(readTopic(t, k.Brokers, cfg.Relay.Topic), committed))
	})
	behind := time.Since(last)
	checks := testenv.Metric(t, reg, "tidemark_capture_visibility_checks_total") - before
	t.Logf("%d single-row commits in %s; in Kafka %s after the last; %.0f snapshots of %s each",
		n, last.Sub(first).Round(time.Millisecond), behind.Round(time.Millisecond), checks, delay)
	// Serial checks would need n x 100 ms = 20 s after the first commit.
	if behind > 5*time.Second {
		t.Errorf("the last commit reached Kafka %s after it was made: transactions waited on snapshot queries of their own", behind.Round(time.Millisecond))
	}
	if checks > n/2 {
		t.Errorf("%.0f snapshots for %d transactions: one per transaction, not one per query in flight", checks, n)
	}
}

// One snapshot answers for many transactions, and a commit the snapshots
// show running is still held. With every snapshot query 50 ms away and a
// synchronous standby named that never connects: 100 single-row
// transactions committed back to back without waiting for it (the lab's
// synchronous_commit = off) reach Kafka with a few snapshots, not one each;
// then a commit that waits for the standby is decoded but invisible, and
// neither it nor the 100 commits after it reach Kafka (the stream's order
// holds them behind it) while the checker keeps asking; once the wait is
// released, all of them do.
func TestOneSnapshotAnswersManyAndHoldsTheInvisible(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t, testenv.PGConf("synchronous_standby_names", "'ghost'"))
	dsn, k, cfg := newRig(t, pg)
	const delay = 50 * time.Millisecond
	reg := startSlowChecks(t, cfg, delay).reg

	conn := connect(t, dsn)
	checks := func() float64 { return testenv.Metric(t, reg, "tidemark_capture_visibility_checks_total") }
	// burst commits items [from, to) as separate transactions in one
	// simple-protocol round trip, so they are decoded one right behind
	// the other whatever the box's load.
	burst := func(from, to int) []kv {
		var sql strings.Builder
		var out []kv
		for i := from; i < to; i++ {
			fmt.Fprintf(&sql, "BEGIN; INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'b%d', 1); COMMIT;\n", i)
			out = append(out, kv{schema.Key("t", fmt.Sprintf("b%d", i)), 1})
		}
		if _, err := conn.PgConn().Exec(context.Background(), sql.String()).ReadAll(); err != nil {
			t.Fatalf("burst of commits %d-%d: %v", from, to-1, err)
		}
		return out
	}
	const n = 100

	c0 := checks()
	first := burst(0, n)
	testenv.Eventually(t, 60*time.Second, "the first burst in the topic", func() error {
		return joinErr(missing(readTopic(t, k.Brokers, cfg.Relay.Topic), first))
	})
	burstChecks := checks() - c0
	if burstChecks > n/4 {
		t.Errorf("%.0f snapshots for a burst of %d transactions: each waited on a query of its own, not on the one in flight", burstChecks, n)
	}

	// The stalled commit, then a second burst behind it in the stream.
	committed, release := testenv.StallCommit(t, dsn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'stalled', 1)")
	stalled := kv{schema.Key("t", "stalled"), 1}
	second := burst(n, 2*n)
	var end string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "capture's walsender sent the second burst", func() error {
		var sent bool
		err := conn.QueryRow(context.Background(), `SELECT r.sent_lsn >= $2::pg_lsn FROM pg_stat_replication r
			JOIN pg_replication_slots s ON s.active_pid = r.pid WHERE s.slot_name = $1`, cfg.Slot, end).Scan(&sent)
		if err != nil {
			return err
		}
		if !sent {
			return errors.New("not yet")
		}
		return nil
	})
	// Held: none of them in Kafka while the checker asks again and again,
	// five more snapshots each showing the stalled commit running.
	held := append([]kv{stalled}, second...)
	c1 := checks()
	testenv.Eventually(t, 60*time.Second, "five snapshots taken while the stalled commit is held", func() error {
		got := checks() - c1
		recs := readTopic(t, k.Brokers, cfg.Relay.Topic)
		var through []string
		for _, h := range held {
			if missing(recs, []kv{h}) == nil {
				through = append(through, fmt.Sprintf("%s@%d", h.key, h.version))
			}
		}
		if len(through) > 0 {
			t.Fatalf("%d of the stalled commit and the %d behind it reached Kafka while it was invisible to new snapshots (%.0f snapshots since): %s",
				len(through), n, got, strings.Join(through[:min(len(through), 5)], ", "))
		}
		if got < 5 {
			return fmt.Errorf("%.0f snapshots since the second burst was sent", got)
		}
		return nil
	})
	select {
	case err := <-committed:
		t.Fatalf("the stalled write returned during the stall: %v", err)
	default:
	}

	release()
	select {
	case err := <-committed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the stalled write did not return after synchronous_standby_names was cleared")
	}
	testenv.Eventually(t, 60*time.Second, "the stalled commit and the burst behind it in the topic", func() error {
		return joinErr(missing(readTopic(t, k.Brokers, cfg.Relay.Topic), held))
	})
	if got := testenv.Metric(t, reg, "tidemark_capture_invisible_wait_seconds_total"); got <= 0 {
		t.Errorf("tidemark_capture_invisible_wait_seconds_total = %v after a held commit", got)
	}
	t.Logf("%.0f snapshots answered a burst of %d transactions (%s each); the stalled commit and the %d behind it were held through %.0f snapshots",
		burstChecks, n, delay, n, checks()-c1)
}
