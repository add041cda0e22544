package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/localserver"
)

// KafkaEnv is the switch for the Kafka that StartKafka gives: unset or
// "kfake" is the in-process fake; "real" is a 3-node Apache Kafka KRaft
// cluster (see localserver.NewKafka), shared by the tests of one test binary,
// or by every test binary given KafkaClusterEnv.
const KafkaEnv = "TIDEMARK_TEST_KAFKA"

// KafkaClusterEnv names a file describing a running cluster with SASL_SSL
// (`tidemark-lab kafka --real --sasl-dir DIR --describe FILE`): with
// KafkaEnv=real, StartKafka gives that cluster instead of starting one, so
// the test binaries of one `go test` run share its three JVMs (make
// test-kafka). Tests that kill nodes start their own (StartRealKafka).
const KafkaClusterEnv = "TIDEMARK_TEST_KAFKA_CLUSTER"

// RealKafka reports whether TIDEMARK_TEST_KAFKA selects the real cluster.
// Any value other than "", "kfake" and "real" fails the first test that asks
// for Kafka.
func RealKafka() bool { return os.Getenv(KafkaEnv) == "real" }

// Kafka is a Kafka cluster for a test: kfake (Cluster set) or real Apache
// Kafka (Real set).
type Kafka struct {
	Cluster *kfake.Cluster
	Real    *localserver.Kafka
	Brokers []string // PLAINTEXT: the harness's own listener (on the real cluster a super user)
	// SASL are the real cluster's SASL_SSL addresses, where ACLs apply
	// (users: KafkaUser, RoleUser); Certs made its CA and certificates.
	SASL  []string
	Certs localserver.Certs
}

// BrokerList is the brokers joined by commas, as --kafka takes them.
func (k *Kafka) BrokerList() string { return strings.Join(k.Brokers, ",") }

// StartKafka gives the test a Kafka: a kfake cluster (one broker unless opts
// say otherwise), closed when the test ends, or, with TIDEMARK_TEST_KAFKA=real,
// the test binary's shared 3-node Apache Kafka cluster. The kfake options
// configure only the fake; on the real cluster topics are created on request
// (AllowAutoTopicCreation) or with CreateTopic. Tests must use their own topic
// and group names (Unique) so they can share the real cluster.
func StartKafka(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	needServer(t, "StartKafka")
	switch v := os.Getenv(KafkaEnv); v {
	case "", "kfake":
		return StartKfake(t, opts...)
	case "real":
		k, err := sharedRealKafka()
		if err != nil {
			t.Fatalf("testenv: %s=real but the Apache Kafka cluster did not start: %v", KafkaEnv, err)
		}
		return &Kafka{Real: k, Brokers: k.Brokers(), SASL: k.SASLBrokers(), Certs: realKafka.certs}
	default:
		t.Fatalf("testenv: %s=%q: want \"real\" or \"kfake\" (the default)", KafkaEnv, v)
		return nil
	}
}

// StartKfake always starts a kfake cluster: for tests of what only the fake
// can inject (kfake.Fault) or configure.
func StartKfake(t testing.TB, opts ...kfake.Opt) *Kafka {
	t.Helper()
	needServer(t, "StartKfake")
	opts = append([]kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Kafka{Cluster: c, Brokers: c.ListenAddrs()}
}

// StartRealKafka starts a private Apache Kafka cluster of nodes KRaft nodes
// (broker and controller each) for one test, whatever the switch says: fault
// tests kill and restart its nodes. conf overrides broker settings. It fails
// the test loudly when Java, Maven or the broker cannot start.
func StartRealKafka(t testing.TB, nodes int, conf map[string]string) *Kafka {
	t.Helper()
	needServer(t, "StartRealKafka")
	k, _, remove, err := newRealKafka(nodes, conf, false)
	if err != nil {
		t.Fatalf("testenv: start Apache Kafka: %v", err)
	}
	t.Cleanup(remove)
	return &Kafka{Real: k, Brokers: k.Brokers()}
}

// newRealKafka starts a cluster in a new temporary directory; with sasl it
// also serves SASL_SSL with ACLs, its certificates made in that directory.
// remove kills the cluster and deletes the directory.
func newRealKafka(nodes int, conf map[string]string, sasl bool) (k *localserver.Kafka, certs localserver.Certs, remove func(), err error) {
	dir, err := os.MkdirTemp("", "tidemark-kafka-")
	if err != nil {
		return nil, certs, nil, err
	}
	cfg := localserver.KafkaConfig{Dir: filepath.Join(dir, "cluster"), Nodes: nodes, Conf: conf}
	if sasl {
		if certs, err = localserver.MakeCerts(filepath.Join(dir, "certs")); err != nil {
			os.RemoveAll(dir)
			return nil, certs, nil, err
		}
		cfg.SASL = &certs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if k, err = localserver.NewKafka(ctx, cfg); err != nil {
		os.RemoveAll(dir)
		return nil, certs, nil, err
	}
	return k, certs, func() { k.Remove(); os.RemoveAll(dir) }, nil
}

var realKafka struct {
	once  sync.Once
	k     *localserver.Kafka
	certs localserver.Certs
	err   error
}

// sharedRealKafka is the test binary's cluster: PLAINTEXT for the harness
// and SASL_SSL with ACLs for the roles under test. KafkaClusterEnv names one
// another process runs; else the first test to ask starts it.
func sharedRealKafka() (*localserver.Kafka, error) {
	realKafka.once.Do(func() {
		if path := os.Getenv(KafkaClusterEnv); path != "" {
			info, err := localserver.ReadKafkaInfo(path)
			if err == nil && (info.Certs == nil || len(info.Nodes) != 3) {
				err = fmt.Errorf("%s=%s: want 3 nodes with SASL_SSL (--brokers 3 --sasl-dir), got %d nodes, certificates %v", KafkaClusterEnv, path, len(info.Nodes), info.Certs != nil)
			}
			if err != nil {
				realKafka.err = err
				return
			}
			realKafka.k, realKafka.certs = localserver.AttachKafka(info), *info.Certs
			return
		}
		var remove func()
		realKafka.k, realKafka.certs, remove, realKafka.err = newRealKafka(3, nil, true)
		if realKafka.err == nil {
			shared.add(remove)
		}
	})
	return realKafka.k, realKafka.err
}

// CreateTopic creates topic with the given partitions (replication factor:
// the cluster default) and waits until every partition has a leader.
func (k *Kafka) CreateTopic(t testing.TB, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx := Context(t, time.Minute)
	cl, err := newAdmin(k.Brokers)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer cl.Close()
	resp, err := cl.CreateTopic(ctx, partitions, -1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("testenv: create topic %s: %v", topic, err)
	}
	Eventually(t, time.Minute, "topic "+topic+" has leaders", func() error {
		td, err := cl.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		d := td[topic]
		if d.Err != nil {
			return d.Err
		}
		if len(d.Partitions) != int(partitions) {
			return fmt.Errorf("%d of %d partitions", len(d.Partitions), partitions)
		}
		for _, p := range d.Partitions {
			if p.Err != nil || p.Leader < 0 {
				return fmt.Errorf("partition %d: leader %d, %v", p.Partition, p.Leader, p.Err)
			}
		}
		return nil
	})
}

func newAdmin(brokers []string) (*kadm.Client, error) {
	return kadm.NewOptClient(kgo.SeedBrokers(brokers...))
}

// Admin is an admin client on the harness's listener, closed with the test.
func (k *Kafka) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	adm, err := newAdmin(k.Brokers)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(adm.Close)
	return adm
}
