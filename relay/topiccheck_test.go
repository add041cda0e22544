package relay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func checkProducer(t *testing.T, k *testenv.Kafka, topic string) *Producer {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Topic, cfg.CreateTopic = k.Brokers, topic, false
	if k.Real != nil { // over SASL_SSL as a user holding only capture's ACLs
		cfg.Brokers, cfg.Kafka = k.SASL, k.RoleUser(t, testenv.RoleCapture, topic, "g-"+topic)
	}
	p, err := New(cfg, Deps{Log: testenv.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// The topic's real configuration is read from the cluster: a topic that
// deletes segments sooner than the cache's hard lifetime plus an outage,
// is not compacted, or (on a cluster big enough) is under-replicated fails
// with each problem and its fix; once fixed, the check passes.
func TestCheckTopicConfig(t *testing.T) {
	k := testenv.StartKafka(t)
	topic := testenv.Unique(t, "t")
	s := func(v string) *string { return &v }
	k.CreateTopic(t, topic, 3, map[string]*string{"cleanup.policy": s("delete"), "retention.ms": s("60000"), "min.insync.replicas": s("1"),
		"min.compaction.lag.ms": s("1000")})
	p := checkProducer(t, k, topic)
	ctx := testenv.Context(t, time.Minute)

	err := p.CheckTopic(ctx, DefaultTopicRequirements())
	if !errors.Is(err, ErrTopicConfig) {
		t.Fatalf("CheckTopic = %v, want ErrTopicConfig", err)
	}
	want := []string{`cleanup.policy is "delete"`, "cleanup.policy=[compact,delete]",
		"retention.ms is 60000 but must be at least 86429800", "--add-config retention.ms=86429800"}
	// A compacted topic keeps a reset marker as long as a rewind must
	// find records, or a lagging applier could miss it.
	compacted := testenv.Unique(t, "c")
	k.CreateTopic(t, compacted, 3, map[string]*string{"cleanup.policy": s("compact,delete"), "retention.ms": s("604800000"),
		"min.compaction.lag.ms": s("1000")})
	cerr := checkProducer(t, k, compacted).CheckTopic(testenv.Context(t, time.Minute), DefaultTopicRequirements())
	for _, w := range []string{"min.compaction.lag.ms is 1000 but must be at least 86429800", "--add-config min.compaction.lag.ms=86429800"} {
		if cerr == nil || !strings.Contains(cerr.Error(), w) {
			t.Errorf("compacted topic with a 1 s compaction lag: error %v does not say %q", cerr, w)
		}
	}
	if k.Real != nil { // three brokers: two in sync are required
		want = append(want, "min.insync.replicas is 1 but 2 is needed", "--add-config min.insync.replicas=2")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	// Topic() fails the same way (capture stops on it before streaming).
	if _, _, err := p.Topic(ctx); !errors.Is(err, ErrTopicConfig) {
		t.Fatalf("Topic = %v, want ErrTopicConfig", err)
	}

	// The operator's fix: capture holds no AlterConfigs.
	resp, err := k.Admin(t).AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Name: "cleanup.policy", Value: s("compact,delete")},
		{Name: "retention.ms", Value: s("604800000")},
		{Name: "min.insync.replicas", Value: s("2")},
		{Name: "min.compaction.lag.ms", Value: s("86429800")},
	}, topic)
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "fixed topic passes", func() error { return p.CheckTopic(ctx, DefaultTopicRequirements()) })
}

// The retention the topic check requires cannot be lowered below
// MinRetention (--topic-min-retention 0 turned the check off), and
// MinRetention outlasts an entry's hard lifetime and the reset margin: an
// applier lagging less than that must find every record still.
func TestRequiredRetentionHasAFloor(t *testing.T) {
	if MinRetention <= promise.HardLifetime+promise.ResetMargin {
		t.Fatalf("MinRetention %s is not past the hard lifetime and the reset margin (%s)", MinRetention, promise.HardLifetime+promise.ResetMargin)
	}
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Require = []string{"127.0.0.1:9092"}, DefaultTopicRequirements()
	for _, c := range []struct {
		retention time.Duration
		ok        bool
	}{{MinRetention, true}, {24 * time.Hour, true}, {MinRetention - time.Millisecond, false}, {10 * time.Second, false}, {0, false}} {
		cfg.Require.Retention = c.retention
		err := cfg.Validate()
		if (err == nil) != c.ok || (err != nil && !strings.Contains(err.Error(), "Require.Retention")) {
			t.Errorf("retention %s: %v, want accepted %v", c.retention, err, c.ok)
		}
	}
}
