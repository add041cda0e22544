package capture_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// TestProducerDataLossResetsAndResends: the broker answers a produce with
// OUT_OF_ORDER_SEQUENCE_NUMBER, the idempotent producer's sign that records
// it had acknowledged are gone. Capture must not carry on as if nothing
// happened (kgo's default bumps the epoch and continues): it confirms
// nothing more, sends a reset marker (kafka_data_loss) to every partition,
// and streams again from the slot, so the change committed meanwhile
// still arrives; it does not exit.
func TestProducerDataLossResetsAndResends(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartKfake(t) // injects the broker's answer
	cfg := testConfig(t, dsn, k)
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'before', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "before", 1)

	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: cfg.Relay.Topic, Err: kerr.OutOfOrderSequenceNumber})
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'during', 1)")
	testenv.Eventually(t, 30*time.Second, "the broker reported the loss", func() error {
		if fault.Hits() == 0 {
			return errorf("no produce request faulted yet")
		}
		return nil
	})
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'after', 1)")
	var recs []record
	testenv.Eventually(t, 60*time.Second, "a kafka_data_loss reset on every partition, and every change re-sent", func() error {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("capture exited on the data loss: %v", err)
		default:
		}
		recs = readTopic(t, k.Brokers, cfg.Relay.Topic)
		reset := map[int32]bool{}
		for _, rec := range recs {
			if rs, ok := rec.ev.(*schema.Reset); ok && strings.Contains(rs.Reason, capture.ReasonKafkaDataLoss) {
				reset[rec.partition] = true
			}
		}
		if len(reset) != testPartitions {
			return errorf("kafka_data_loss reset on %d of %d partitions", len(reset), testPartitions)
		}
		return joinErr(missing(recs, []kv{{schema.Key("t", "during"), 1}, {schema.Key("t", "after"), 1}}))
	})
	if n := testenv.Metric(t, r.reg, "tidemark_relay_data_loss_total"); n < 1 {
		t.Fatalf("tidemark_relay_data_loss_total = %v after the loss", n)
	}
	if n := testenv.Metric(t, r.reg, "tidemark_capture_resets_total", "reason", capture.ReasonKafkaDataLoss); n != 1 {
		t.Fatalf("tidemark_capture_resets_total{reason=kafka_data_loss} = %v, want 1", n)
	}
	// Streaming goes on after the reset.
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'later', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "later", 1)
}
