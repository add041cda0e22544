package applier

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testNS = "catalog"

// rig is one test's Kafka topic, Redis and clients.
type rig struct {
	t          *testing.T
	kafka      *testenv.Kafka
	redis      *testenv.Redis
	rdb        *redis.Client
	cache      *cache.Client
	topic      string
	partitions int32
	prod       *kgo.Client // key partitioner, like the relay
	manual     *kgo.Client // markers to a chosen partition
	adm        *kadm.Client
	// On the real cluster the applier and replay reach Kafka over SASL_SSL
	// as users holding only their role's ACLs (the README's table); on
	// kfake over plaintext.
	brokers                 []string
	applyKafka, replayKafka kafkaconn.Config
}

func newRig(t *testing.T, partitions int32) *rig {
	t.Helper()
	topic := testenv.Unique(t, "topic")
	k := testenv.StartKafka(t, kfake.AllowAutoTopicCreation())
	k.CreateTopic(t, topic, partitions, nil)
	rs := testenv.StartRedis(t)
	rdb := rs.Client(t)
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(prod.Close)
	manual, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(manual.Close)
	r := &rig{t: t, kafka: k, redis: rs, rdb: rdb, cache: cc, topic: topic, partitions: partitions,
		prod: prod, manual: manual, adm: kadm.NewClient(prod), brokers: k.Brokers}
	if k.Real != nil {
		k.CreateTopic(t, topic+".dlq", 1, nil) // the role holds no Create
		r.brokers = k.SASL
		r.applyKafka = k.RoleUser(t, testenv.RoleApply, topic, r.group())
		r.replayKafka = k.RoleUser(t, testenv.RoleReplay, topic, "")
	}
	return r
}

func (r *rig) group() string { return "g_" + r.topic }

// replayConfig is a replay of the rig's topic from since.
func (r *rig) replayConfig(since time.Time) ReplayConfig {
	cfg := DefaultReplayConfig()
	cfg.Brokers, cfg.Kafka, cfg.Topic, cfg.Since = r.brokers, r.replayKafka, r.topic, since
	return cfg
}

func (r *rig) config() Config {
	cfg := DefaultConfig()
	cfg.Brokers, cfg.Kafka = r.brokers, r.applyKafka
	cfg.Topic = r.topic
	cfg.Group = r.group()
	cfg.SessionTimeout = time.Second
	cfg.CommitInterval = 100 * time.Millisecond
	cfg.IdentityInterval = 100 * time.Millisecond
	cfg.MetricsInterval = 100 * time.Millisecond
	cfg.TopicInterval = time.Second
	cfg.BackoffMin = 20 * time.Millisecond
	cfg.BackoffMax = 300 * time.Millisecond
	return cfg
}

// change is one produced change, for assertions.
type change struct {
	tenant, item string
	version      int64
}

func changeRecord(c change, commit time.Time) *kgo.Record {
	ev := &schema.Change{Tenant: c.tenant, Item: c.item, Version: c.version, Op: schema.OpUpsert,
		LSN: schema.LSN(c.version), CommitTime: commit, Xid: 1}
	return &kgo.Record{Key: []byte(schema.Key(c.tenant, c.item)), Value: schema.Encode(ev)}
}

// produceChanges produces n changes over keys keys with increasing versions
// per key and returns each key's final version.
func (r *rig) produceChanges(prefix string, n, keys int) map[string]int64 {
	r.t.Helper()
	final := map[string]int64{}
	var recs []*kgo.Record
	for i := 0; i < n; i++ {
		item := fmt.Sprintf("%s-%d", prefix, i%keys)
		final[item]++
		recs = append(recs, changeRecord(change{"t1", item, final[item]}, time.Now()))
	}
	r.produce(r.prod, recs...)
	return final
}

func (r *rig) produce(cl *kgo.Client, recs ...*kgo.Record) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		r.t.Fatalf("produce: %v", err)
	}
}

// resolved sends a resolved marker at ts to every partition.
func (r *rig) resolved(ts time.Time) {
	r.t.Helper()
	var recs []*kgo.Record
	for p := int32(0); p < r.partitions; p++ {
		recs = append(recs, &kgo.Record{Partition: p, Key: []byte(schema.MarkerKey(p)),
			Value: schema.Encode(&schema.Resolved{ResolvedTime: ts, LSN: 1})})
	}
	r.produce(r.manual, recs...)
}

func (r *rig) floor(item string) int64 {
	v, err := r.rdb.HGet(context.Background(), schema.RedisKey(testNS, "t1", item), schema.FieldFloor).Result()
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// waitFloors waits until every key's floor is at least its final version.
func (r *rig) waitFloors(timeout time.Duration, final map[string]int64) {
	r.t.Helper()
	testenv.Eventually(r.t, timeout, "every key reaches its final floor", func() error {
		return r.checkFloors(final)
	})
}

func (r *rig) checkFloors(final map[string]int64) error {
	bad := 0
	var example string
	for item, v := range final {
		if f := r.floor(item); f < v {
			bad++
			example = fmt.Sprintf("%s floor %d < %d", item, f, v)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d keys below their final version, e.g. %s", bad, len(final), example)
	}
	return nil
}

// running is an applier running in the background.
type running struct {
	a    *Applier
	reg  *prometheus.Registry
	stop func() error
}

func (r *rig) start(cfg Config, c Cache) *running {
	r.t.Helper()
	if c == nil {
		c = r.cache
	}
	reg := prometheus.NewRegistry()
	a, err := New(cfg, Deps{Cache: c, Log: testenv.Logger(r.t), Registerer: reg})
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-errc:
			case <-time.After(30 * time.Second):
				runErr = errors.New("applier did not stop within 30s")
			}
		})
		return runErr
	}
	r.t.Cleanup(func() { stop() })
	return &running{a: a, reg: reg, stop: stop}
}

// fetchOffsets returns the group's committed offsets of the topic, per
// partition.
func (r *rig) fetchOffsets(group string) map[int32]kadm.OffsetResponse {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.adm.FetchOffsets(ctx, group)
	if err != nil {
		r.t.Fatalf("fetch offsets: %v", err)
	}
	return resp[r.topic]
}

// committed returns the group's committed offsets per partition.
func (r *rig) committed(group string) map[int32]int64 {
	r.t.Helper()
	out := map[int32]int64{}
	for p, o := range r.fetchOffsets(group) {
		if o.Err == nil {
			out[p] = o.At
		}
	}
	return out
}

func (r *rig) endOffsets() map[int32]int64 {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := r.adm.ListEndOffsets(ctx, r.topic)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

func (r *rig) watermark() cache.Watermark {
	r.t.Helper()
	wm, err := r.cache.ReadWatermark(context.Background())
	if err != nil {
		r.t.Fatalf("read watermark: %v", err)
	}
	return wm
}
