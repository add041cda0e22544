package relay

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

// The topic grows between capture's admin read and its first produce: kgo
// holds a new client's first records until it has loaded the topic's
// partitions and places them with the count loaded then. Placed waits for
// that, so a marker fanned out right after the record covers the partition
// it lands on.
func TestPlacedCoversAGrowthBeforeTheFirstProduce(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := testenv.Unique(t, "t")
	s := func(v string) *string { return &v }
	k.CreateTopic(t, topic, 3, map[string]*string{"cleanup.policy": s("compact,delete"), "retention.ms": s("604800000"),
		"min.compaction.lag.ms": s("86429800")})
	p := checkProducer(t, k, topic)
	ctx := testenv.Context(t, time.Minute)
	n, _, err := p.Topic(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Topic = %d, %v; want 3 partitions", n, err)
	}
	if resp, err := k.Admin(t).CreatePartitions(ctx, 3, topic); err != nil || resp.Error() != nil {
		t.Fatalf("grow the topic to 6 partitions: %v %v", err, resp.Error())
	}
	// The producer's view must see the 6 partitions when it loads, from
	// whichever broker it asks: each broker learns of the growth on its own
	// (on a real cluster one may still list 3 after another lists 6).
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	testenv.Eventually(t, 30*time.Second, "every broker lists 6 partitions", func() error {
		brokers, err := kadm.NewClient(cl).BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		for _, b := range brokers.Brokers {
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
			if err != nil {
				return fmt.Errorf("broker %d: %w", b.NodeID, err)
			}
			if len(resp.Topics) != 1 {
				return fmt.Errorf("broker %d lists %d topics", b.NodeID, len(resp.Topics))
			}
			if got := len(resp.Topics[0].Partitions); got != 6 {
				return fmt.Errorf("broker %d lists %d partitions", b.NodeID, got)
			}
		}
		return nil
	})
	tr := NewTracker(0)
	x := tr.Begin()
	p.Produce(tr, x, schema.Key("t", "item"), 0, []byte(`{}`), time.Time{})
	tr.Close(x, 1)
	placed, err := p.Placed(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if placed != 6 {
		t.Fatalf("right after the first produce, Placed = %d (Routed %d); want 6, the count the record was placed with", placed, p.Routed())
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}
