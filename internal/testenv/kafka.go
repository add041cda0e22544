package testenv

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is an in-process kfake cluster.
type Kafka struct {
	Cluster *kfake.Cluster
	Brokers []string
}

// BrokerList is the brokers joined by commas, as --kafka takes them.
func (k *Kafka) BrokerList() string { return strings.Join(k.Brokers, ",") }

// StartKafka starts a kfake cluster (one broker unless opts say otherwise),
// closed when the test ends. Pass kfake.Ports, kfake.DataDir, kfake.SeedTopics
// and friends as needed.
func StartKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{Cluster: c, Brokers: c.ListenAddrs()}
}
