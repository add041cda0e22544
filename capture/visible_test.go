package capture_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

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
	reg := prometheus.NewRegistry()
	c, err := capture.New(cfg, capture.Deps{Log: testenv.Logger(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	capture.SlowVisibilityChecks(c, delay)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, reg: reg, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { _ = r.wait(t) })
	r.waitReady(t)

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
