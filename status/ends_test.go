package status

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/lab/testenv"
)

// Right after partitions are added a broker may answer their end offsets
// with UNKNOWN_TOPIC_OR_PARTITION for a moment (seen on Apache Kafka in
// lab/dev's TestGrowTopicWhileRunning): status asks again instead of
// failing the deploy gate, and still fails on an error that persists.
func TestEndOffsetsRetriedWhileRetriable(t *testing.T) {
	topic := testenv.Unique(t, "topic")
	k := testenv.StartKfake(t, kfake.SeedTopics(3, topic))
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := testenv.Context(t, time.Minute)

	// refuse answers the next n ListOffsets requests with the error for
	// every partition asked about, then lets the broker answer.
	refuse := func(n int32) *atomic.Int32 {
		var left atomic.Int32
		left.Store(n)
		k.Cluster.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
			k.Cluster.KeepControl()
			if left.Add(-1) < 0 {
				return nil, nil, false
			}
			lreq := req.(*kmsg.ListOffsetsRequest)
			resp := lreq.ResponseKind().(*kmsg.ListOffsetsResponse)
			for _, rt := range lreq.Topics {
				st := kmsg.NewListOffsetsResponseTopic()
				st.Topic = rt.Topic
				for _, rp := range rt.Partitions {
					sp := kmsg.NewListOffsetsResponseTopicPartition()
					sp.Partition = rp.Partition
					sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
					st.Partitions = append(st.Partitions, sp)
				}
				resp.Topics = append(resp.Topics, st)
			}
			return resp, nil, true
		})
		return &left
	}

	// A topic that does not exist (the DLQ before anything is dead-lettered)
	// answers UNKNOWN_TOPIC_OR_PARTITION for good: not waited on.
	start := time.Now()
	if _, err := listEnds(ctx, adm, topic, topic+".dlq"); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > endsRetry/2 {
		t.Fatalf("listing with a missing DLQ topic took %s: waited on its error", took)
	}

	refuse(2)
	ends, err := listEnds(ctx, adm, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := ends.Error(); err != nil {
		t.Fatalf("after two refusals: %v, want every partition's end offset", err)
	}
	if n := len(ends[topic]); n != 3 {
		t.Fatalf("%d partitions listed, want 3", n)
	}

	left := refuse(1 << 20) // for good
	start = time.Now()
	ends, err = listEnds(context.Background(), adm, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := ends.Error(); err == nil {
		t.Fatal("a refusal that persists: no error in the listing")
	}
	if took := time.Since(start); took < endsRetry || took > endsRetry+10*time.Second {
		t.Fatalf("gave up after %s, want about %s", took, endsRetry)
	}
	left.Store(0)
}
