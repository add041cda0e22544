package capture_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/testenv"
)

// One transaction updating 1,000,000 rows: every row arrives, and the
// capture process (the real binary) stays small because events stream to
// Kafka as they are decoded; its peak RSS (VmHWM) is reported.
func TestLargeTransaction(t *testing.T) {
	t.Parallel()
	const rows = 1_000_000
	// A private server: creating a logical slot waits for every transaction
	// running on the server to end, so this test's long ones would hold up
	// the slot creation of every other test sharing it.
	pg := testenv.StartPostgres(t)
	dsn, k, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	// Loaded before the slot exists, so only the big update is captured.
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) SELECT 'big', 'i' || g, 1 FROM generate_series(1, $1) g", rows)
	b := startBinary(t, cfg)
	b.waitReady(t)
	began := time.Now()
	exec(t, conn, "UPDATE catalog.items SET version = 2 WHERE tenant_id = 'big'")
	t.Logf("UPDATE of %d rows committed in %s", rows, time.Since(began).Round(time.Millisecond))

	acked := make(chan time.Duration, 1)
	go func() {
		for b.metric("tidemark_relay_records_produced_total") < rows {
			select {
			case <-b.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		acked <- time.Since(began)
	}()
	seen := make([]bool, rows+1)
	n := 0
	readAll(t, k, cfg.Relay.Topic, 120*time.Second, func(key, value []byte) {
		item, ok := bytes.CutPrefix(key, []byte("big/i"))
		if !ok || !bytes.Contains(value, []byte(`"version":2,`)) {
			return
		}
		i, err := strconv.Atoi(string(item))
		if err == nil && i > 0 && i <= rows && !seen[i] {
			seen[i] = true
			n++
		}
	}, func() bool { return n == rows })
	t.Logf("%d rows read back from Kafka %s after the commit", n, time.Since(began).Round(time.Millisecond))
	select {
	case d := <-acked:
		t.Logf("capture had all %d records acked %s after the commit", rows, d.Round(time.Millisecond))
	case <-time.After(5 * time.Second):
	}

	status, err := os.ReadFile("/proc/" + strconv.Itoa(b.Pid()) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			t.Logf("capture peak RSS (VmHWM): %.1f MiB (goal < 128 MiB)", float64(kb)/1024)
			if kb > 128*1024 {
				t.Fatalf("capture peak RSS %.1f MiB exceeds 128 MiB: the transaction is being held in memory", float64(kb)/1024)
			}
		}
	}
}

// readAll consumes topic from the start until done() or the timeout.
func readAll(t *testing.T, k *testenv.Kafka, topic string, timeout time.Duration, each func(key, value []byte), done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	parts := map[int32]kgo.Offset{}
	testenv.Eventually(t, 30*time.Second, "topic exists", func() error {
		td, err := kadm.NewClient(adm).ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		if len(td[topic].Partitions) == 0 {
			return errorf("no partitions yet")
		}
		for _, p := range td[topic].Partitions {
			parts[p.Partition] = kgo.NewOffset().AtStart()
		}
		return nil
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
		kgo.FetchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v", topic, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { each(r.Key, r.Value) })
	}
}
