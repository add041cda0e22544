//go:build realkafka

package capture_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/schema"
)

// Fault tests that only a real Apache Kafka cluster can run (see the
// realkafka build tag in the Makefile's test-kafka target).

// stream is a steady stream of single-row updates over a fixed key set,
// each committed transaction recorded with its commit time and an upper
// bound of its commit LSN (the WAL position read right after COMMIT).
type stream struct {
	mu        sync.Mutex
	committed []streamTxn
	stop      chan struct{}
	done      chan error
}

type streamTxn struct {
	key     string
	version int64
	at      time.Time
	upper   schema.LSN
}

func startStream(t *testing.T, dsn string, keys int, every time.Duration) *stream {
	t.Helper()
	conn := connect(t, dsn)
	exec(t, conn, `INSERT INTO catalog.items (tenant_id, item_id, version, display)
		SELECT 'ts', 'k' || i, 1, '{}' FROM generate_series(0, $1 - 1) i`, keys)
	s := &stream{stop: make(chan struct{}), done: make(chan error, 1)}
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		ctx := context.Background()
		for i := 0; ; i++ {
			select {
			case <-s.stop:
				s.done <- nil
				return
			case <-tick.C:
			}
			item := fmt.Sprintf("k%d", i%keys)
			var v int64
			if err := conn.QueryRow(ctx, "UPDATE catalog.items SET version = version + 1 WHERE tenant_id = 'ts' AND item_id = $1 RETURNING version", item).Scan(&v); err != nil {
				s.done <- fmt.Errorf("update %s: %w", item, err)
				return
			}
			at := time.Now()
			var lsn string
			if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
				s.done <- err
				return
			}
			upper, err := schema.ParseLSN(lsn)
			if err != nil {
				s.done <- err
				return
			}
			s.mu.Lock()
			s.committed = append(s.committed, streamTxn{schema.Key("ts", item), v, at, upper})
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { s.end(t) })
	return s
}

// end stops the stream and returns every committed transaction.
func (s *stream) end(t *testing.T) []streamTxn {
	t.Helper()
	select {
	case <-s.stop:
	default:
		close(s.stop)
		if err := <-s.done; err != nil {
			t.Fatalf("update stream: %v", err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.committed)
}

func (s *stream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.committed)
}

// tail consumes topic live and notes when each (key, version) arrived.
type tail struct {
	mu      sync.Mutex
	arrived map[kv]time.Time
	part    map[kv]int32
}

func startTail(t *testing.T, brokers []string, topic string) *tail {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tl := &tail{arrived: map[kv]time.Time{}, part: map[kv]int32{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				ev, err := schema.Decode(r.Value)
				if err != nil {
					return
				}
				if c, ok := ev.(*schema.Change); ok {
					tl.mu.Lock()
					k := kv{c.Key(), c.Version}
					if _, seen := tl.arrived[k]; !seen {
						tl.arrived[k], tl.part[k] = now, r.Partition
					}
					tl.mu.Unlock()
				}
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return tl
}

// leaders maps each partition of topic to its leader's node id.
func leaders(t *testing.T, brokers []string, topic string) map[int32]int32 {
	t.Helper()
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int32{}
	for _, p := range td[topic].Partitions {
		out[p.Partition] = p.Leader
	}
	return out
}

// verdict compares the topic with what was committed: lost versions, and
// records out of version order per key (a lower version after a higher one).
type verdict struct {
	produced, lost, reordered, duplicates, confirmedLost int
	lostList                                             []string
}

func judge(recs []record, committed []streamTxn) verdict {
	v := verdict{produced: len(committed)}
	have := map[kv]bool{}
	last := map[string]int64{}
	for _, r := range recs {
		c, ok := r.ev.(*schema.Change)
		if !ok {
			continue
		}
		k := kv{c.Key(), c.Version}
		if have[k] {
			v.duplicates++
		}
		have[k] = true
		if c.Version < last[c.Key()] {
			v.reordered++
		}
		last[c.Key()] = max(last[c.Key()], c.Version)
	}
	for _, c := range committed {
		if !have[kv{c.key, c.version}] {
			v.lost++
			if len(v.lostList) < 10 {
				v.lostList = append(v.lostList, fmt.Sprintf("%s@%d", c.key, c.version))
			}
		}
	}
	return v
}

// killDuringStream runs capture against k with a steady update stream,
// kills -9 the node pick chooses (given the data topic's partition
// leaders), keeps streaming with it down, and judges the topic as the
// survivors serve it: nothing lost, no key reordered, and the slot never
// confirmed past what they hold. It returns the victim and the figures.
func killDuringStream(t *testing.T, k *testenv.Kafka, pick func(leaders map[int32]int32) int32) (int32, verdict, time.Duration) {
	t.Helper()
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	cfg := testConfig(t, dsn, k)
	r := start(t, cfg)
	r.waitReady(t)
	watch := connect(t, dsn)

	tl := startTail(t, k.Brokers, cfg.Relay.Topic)
	s := startStream(t, dsn, 60, 4*time.Millisecond)
	testenv.Eventually(t, time.Minute, "stream flowing into Kafka", func() error {
		if n := s.count(); n < 300 {
			return fmt.Errorf("%d committed", n)
		}
		return nil
	})

	lead := leaders(t, k.Brokers, cfg.Relay.Topic)
	victim := pick(lead)
	var victimParts []int32
	for p, l := range lead {
		if l == victim {
			victimParts = append(victimParts, p)
		}
	}
	killed := time.Now()
	k.Real.Node(victim).Kill()
	t.Logf("killed node %d, leader of partitions %v, after %d committed updates", victim, victimParts, s.count())

	// Sample the confirmed LSN while the victim is down.
	var maxConfirmed schema.LSN
	sampleUntil := time.Now().Add(8 * time.Second)
	for time.Now().Before(sampleUntil) {
		maxConfirmed = max(maxConfirmed, slotLSN(t, watch, cfg.Slot))
		time.Sleep(100 * time.Millisecond)
	}
	committed := s.end(t)

	// Everything committed arrives (the victim stays down), then judge.
	var recs []record
	testenv.Eventually(t, 2*time.Minute, "every committed update in the topic", func() error {
		recs = readTopic(t, k.Brokers, cfg.Relay.Topic)
		if v := judge(recs, committed); v.lost > 0 {
			return fmt.Errorf("%d of %d missing: %v", v.lost, v.produced, v.lostList)
		}
		return nil
	})
	v := judge(recs, committed)
	maxConfirmed = max(maxConfirmed, slotLSN(t, watch, cfg.Slot))

	// Confirmed but not held: a committed update whose commit is at or
	// below a confirmed LSN must be in the topic the survivors serve.
	present := map[kv]bool{}
	for _, rc := range recs {
		if c, ok := rc.ev.(*schema.Change); ok {
			present[kv{c.Key(), c.Version}] = true
		}
	}
	for _, c := range committed {
		if c.upper <= maxConfirmed && !present[kv{c.key, c.version}] {
			v.confirmedLost++
		}
	}

	// Time to resume: from the kill to the first update committed after it
	// arriving on a partition the victim led.
	var resume time.Duration
	tl.mu.Lock()
	for _, c := range committed {
		k := kv{c.key, c.version}
		at, ok := tl.arrived[k]
		if !ok || !c.at.After(killed) || (len(victimParts) > 0 && !slices.Contains(victimParts, tl.part[k])) {
			continue
		}
		if d := at.Sub(killed); resume == 0 || d < resume {
			resume = d
		}
	}
	tl.mu.Unlock()
	t.Logf("node %d killed: records produced %d, lost %d, reordered %d, duplicates %d, confirmed-but-lost %d, time to resume %s",
		victim, v.produced, v.lost, v.reordered, v.duplicates, v.confirmedLost, resume.Round(time.Millisecond))
	if v.lost != 0 || v.reordered != 0 || v.confirmedLost != 0 {
		t.Fatalf("lost %d %v, reordered %d, confirmed but not in Kafka %d", v.lost, v.lostList, v.reordered, v.confirmedLost)
	}
	if resume == 0 {
		t.Fatal("no update committed after the kill arrived on the killed node's partitions")
	}
	return victim, v, resume
}

// Kill -9 the leader of a partition while updates stream in: with acks=all
// and the idempotent producer, nothing acknowledged is lost when a follower
// takes over, no key's versions are reordered, and the slot is never
// confirmed past what the surviving brokers hold (the topic is read with the
// killed broker still down).
func TestRealLeaderKillDuringUpdates(t *testing.T) {
	k := testenv.StartRealKafka(t, 3, nil)
	killDuringStream(t, k, func(lead map[int32]int32) int32 { return lead[0] })
}

// Kill -9 the active KRaft controller (each node is also a broker) during
// the stream: another node takes over the quorum, the data flows on
// unharmed, and the cluster accepts metadata changes (a new topic) again.
func TestRealControllerFailover(t *testing.T) {
	k := testenv.StartRealKafka(t, 3, nil)
	ctx := testenv.Context(t, 3*time.Minute)
	var before int32
	victim, _, _ := killDuringStream(t, k, func(map[int32]int32) int32 {
		id, err := k.Real.ActiveController(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before = id
		return id
	})
	if victim != before {
		t.Fatalf("killed %d, controller was %d", victim, before)
	}
	testenv.Eventually(t, time.Minute, "a new active controller", func() error {
		id, err := k.Real.ActiveController(ctx)
		if err != nil {
			return err
		}
		if id == before || k.Real.Node(id) == nil {
			return fmt.Errorf("controller %d", id)
		}
		return nil
	})
	k.CreateTopic(t, testenv.Unique(t, "after_failover"), 3, nil)
}

// With min.insync.replicas=2 and one of the topic's two replicas down,
// Kafka refuses acks=all writes: capture keeps retrying and holds the
// slot's confirm below the refused transaction; when the broker returns,
// the transaction arrives and the slot moves on.
func TestRealMinInsyncHoldsConfirm(t *testing.T) {
	pg := testenv.SharedPostgres(t)
	dsn := pg.MigratedDatabase(t)
	k := testenv.StartRealKafka(t, 3, nil)
	cfg := testConfig(t, dsn, k)
	cfg.Relay.Require = relay.DefaultTopicRequirements()
	cfg.Relay.Require.ReplicationFactor = 2 // two replicas, both required in sync
	createOnNodes(t, k, cfg.Relay.Topic, testPartitions, []int32{1, 2},
		map[string]string{"min.insync.replicas": "2", "cleanup.policy": "compact,delete",
			"min.compaction.lag.ms": strconv.FormatInt(cfg.Relay.Require.Retention.Milliseconds(), 10)})
	conn := connect(t, dsn)
	r := start(t, cfg)
	r.waitReady(t)
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'before', 1)")
	waitItem(t, k, cfg.Relay.Topic, "t", "before", 1)

	k.Real.Node(2).Kill()
	testenv.Eventually(t, time.Minute, "ISR shrinks to node 1", func() error {
		return isrIs(t, k, cfg.Relay.Topic, []int32{1})
	})
	exec(t, conn, "INSERT INTO catalog.items (tenant_id, item_id, version) VALUES ('t', 'during', 1)")
	var maxSeen schema.LSN
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		maxSeen = max(maxSeen, slotLSN(t, conn, cfg.Slot))
		time.Sleep(100 * time.Millisecond)
	}
	if len(missing(readTopic(t, k.Brokers, cfg.Relay.Topic), []kv{{schema.Key("t", "during"), 1}})) == 0 {
		t.Fatal("record acknowledged with one in-sync replica despite min.insync.replicas=2")
	}
	if err := k.Real.Node(2).Start(); err != nil {
		t.Fatal(err)
	}
	var held schema.LSN
	for _, r := range waitItem(t, k, cfg.Relay.Topic, "t", "during", 1) {
		if c, ok := r.ev.(*schema.Change); ok && c.Item == "during" {
			held = c.LSN
		}
	}
	if maxSeen > held {
		t.Fatalf("confirmed_flush_lsn reached %s, past the commit at %s, while Kafka lacked the in-sync replicas for it", maxSeen, held)
	}
	testenv.Eventually(t, time.Minute, "slot advances after the broker returns", func() error {
		if got := slotLSN(t, conn, cfg.Slot); got <= held {
			return errorf("confirmed_flush_lsn %s", got)
		}
		return nil
	})
}

// createOnNodes creates topic with every partition's replicas on nodes.
func createOnNodes(t *testing.T, k *testenv.Kafka, topic string, partitions int32, nodes []int32, configs map[string]string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, -1, -1
	for p := range partitions {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition = p
		ra.Replicas = nodes
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	}
	for name, v := range configs {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = name, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, c)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(testenv.Context(t, time.Minute), cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	testenv.Eventually(t, time.Minute, "topic has leaders", func() error {
		for p, l := range leaders(t, k.Brokers, topic) {
			if l < 0 {
				return fmt.Errorf("partition %d has no leader", p)
			}
		}
		return nil
	})
}

// isrIs checks every partition's in-sync replica set.
func isrIs(t *testing.T, k *testenv.Kafka, topic string, want []int32) error {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		return err
	}
	defer adm.Close()
	td, err := adm.ListTopics(testenv.Context(t, 30*time.Second), topic)
	if err != nil {
		return err
	}
	for _, p := range td[topic].Partitions {
		isr := slices.Sorted(slices.Values(p.ISR))
		if !slices.Equal(isr, want) {
			return fmt.Errorf("partition %d ISR %v", p.Partition, isr)
		}
	}
	return nil
}
