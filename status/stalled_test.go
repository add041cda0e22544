package status

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/applier"
	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// While Redis refuses writes, `tidemark status` shows the partition the
// applier holds as stalled, with the Redis error, and is not OK; once writes
// work again the stall is gone. It also reports every master's
// maxmemory-policy and flags an allkeys-* one.
func TestStatusShowsStalledPartition(t *testing.T) {
	topic := testenv.Unique(t, "topic")
	k := testenv.StartKafka(t, kfake.SeedTopics(1, topic))
	rs := testenv.StartRedis(t)
	rdb := rs.Client(t)
	ctx := testenv.Context(t, 5*time.Minute)
	cc, err := cache.New(cache.DefaultConfig(), cache.Deps{Redis: rdb, Log: testenv.Logger(t), Registerer: nil})
	if err != nil {
		t.Fatal(err)
	}
	acfg := applier.DefaultConfig()
	acfg.Brokers, acfg.Topic, acfg.Group = k.Brokers, topic, "g_"+topic
	acfg.SessionTimeout, acfg.CommitInterval = time.Second, 100*time.Millisecond
	acfg.BackoffMin, acfg.BackoffMax = 20*time.Millisecond, 200*time.Millisecond
	app, err := applier.New(acfg, applier.Deps{Cache: cc, Log: testenv.Logger(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- app.Run(actx) }()
	t.Cleanup(func() { stop(); <-done })

	prod, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(v int64) {
		ev := &schema.Change{Tenant: "t1", Item: "a", Version: v, Op: schema.OpUpsert, LSN: schema.LSN(v), CommitTime: time.Now(), Xid: 1}
		mark := &schema.Resolved{ResolvedTime: time.Now(), LSN: schema.LSN(v)}
		if err := prod.ProduceSync(ctx,
			&kgo.Record{Key: []byte(schema.Key("t1", "a")), Value: schema.Encode(ev)},
			&kgo.Record{Key: []byte(schema.MarkerKey(0)), Value: schema.Encode(mark)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	scfg := DefaultConfig()
	scfg.Brokers, scfg.Topic, scfg.Group, scfg.Redis = k.Brokers, topic, acfg.Group, "redis://"+rs.Addr
	check := func(cond func(Report) error) Report {
		t.Helper()
		var rep Report
		testenv.Eventually(t, time.Minute, "status report", func() error {
			var err error
			if rep, err = Check(ctx, scfg); err != nil {
				return err
			}
			return cond(rep)
		})
		return rep
	}
	produce(1)
	check(func(rep Report) error {
		if rep.Verdict != OK || rep.Partitions[0].Stalled != nil || rep.Partitions[0].Lag != 0 {
			return fmt.Errorf("verdict %s (%s), partition %+v", rep.Verdict, rep.Reason, rep.Partitions[0])
		}
		return nil
	})

	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	produce(2)
	rep := check(func(rep Report) error {
		st := rep.Partitions[0].Stalled
		if st == nil || !strings.HasPrefix(st.Error, "NOREPLICAS") && !strings.Contains(st.Error, ": NOREPLICAS") {
			return fmt.Errorf("partition %+v not stalled on NOREPLICAS", rep.Partitions[0])
		}
		if rep.Verdict == OK || !strings.Contains(rep.Reason, "NOREPLICAS") {
			return fmt.Errorf("verdict %s (%s)", rep.Verdict, rep.Reason)
		}
		return nil
	})
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	t.Logf("tidemark status while Redis refuses writes:\n%s", text.String())
	for _, want := range []string{"STALLED", "NOREPLICAS", "maxmemory-policy"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("status text lacks %q:\n%s", want, text.String())
		}
	}

	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	check(func(rep Report) error {
		if rep.Partitions[0].Stalled != nil || rep.Partitions[0].Lag != 0 {
			return fmt.Errorf("partition %+v", rep.Partitions[0])
		}
		return nil
	})

	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	check(func(rep Report) error {
		if rep.EvictionPolicy[rs.Addr] != "allkeys-lru" || rep.Verdict == OK || !strings.Contains(rep.Reason, "volatile-lru") {
			return fmt.Errorf("policies %v, verdict %s (%s)", rep.EvictionPolicy, rep.Verdict, rep.Reason)
		}
		return nil
	})
}
