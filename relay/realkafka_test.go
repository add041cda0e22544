//go:build realkafka

package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// On a three-broker cluster a topic with one replica is refused with the
// fix; one with three passes.
func TestRealCheckTopicReplication(t *testing.T) {
	k := testenv.StartKafka(t) // the shared cluster: make test-kafka sets TIDEMARK_TEST_KAFKA=real
	if k.Real == nil {
		t.Fatalf("the realkafka tests need %s=real", testenv.KafkaEnv)
	}
	ctx := testenv.Context(t, time.Minute)
	topic := testenv.Unique(t, "t")
	p := checkProducer(t, k, topic)
	if _, err := k.Admin(t).CreateTopic(ctx, 3, 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	var err error
	testenv.Eventually(t, 30*time.Second, "check sees the topic", func() error {
		err = p.CheckTopic(ctx, DefaultTopicRequirements())
		if errors.Is(err, ErrTopicConfig) {
			return nil
		}
		return errors.New("no topic configuration error yet")
	})
	if !strings.Contains(err.Error(), "replication factor is 1 but 3 is needed") || !strings.Contains(err.Error(), "--replication-factor 3") {
		t.Fatalf("error %q does not name the replication factor and its fix", err)
	}
	good := testenv.Unique(t, "good")
	policy := "compact,delete"
	lag := "86429800"
	k.CreateTopic(t, good, 3, map[string]*string{"cleanup.policy": &policy, "min.compaction.lag.ms": &lag})
	if err := checkProducer(t, k, good).CheckTopic(ctx, DefaultTopicRequirements()); err != nil {
		t.Fatalf("a 3-replica topic with min.insync.replicas=2: %v", err)
	}
}
