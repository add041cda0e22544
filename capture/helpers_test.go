package capture_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/capture"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const testPartitions = 6

// testConfig is a capture config for one database and one Kafka cluster.
func testConfig(t *testing.T, dsn string, k *testenv.Kafka) capture.Config {
	cfg := capture.DefaultConfig()
	cfg.PG = dsn
	cfg.Slot = testenv.Unique(t, "slot") // slots are per server, not per database
	cfg.Relay.Brokers = k.Brokers
	cfg.Relay.Topic = testenv.Unique(t, "topic") // tests may share one real Kafka cluster
	cfg.Relay.Partitions = testPartitions
	cfg.Heartbeat = 200 * time.Millisecond
	cfg.SlotPoll = 500 * time.Millisecond
	cfg.ShutdownTimeout = 10 * time.Second
	return cfg
}

// newRig is the setup most capture tests share: a fresh migrated database on
// pg, a kfake cluster, and a capture config for both.
func newRig(t *testing.T, pg *testenv.Postgres) (dsn string, k *testenv.Kafka, cfg capture.Config) {
	t.Helper()
	dsn = pg.MigratedDatabase(t)
	k = testenv.StartKafka(t)
	return dsn, k, testConfig(t, dsn, k)
}

type running struct {
	c    *capture.Capture
	reg  *prometheus.Registry
	stop context.CancelFunc
	done chan error
}

// start runs a capture until the test ends (or wait is called).
func start(t *testing.T, cfg capture.Config) *running {
	t.Helper()
	return startWith(t, cfg, capture.Deps{}, nil)
}

// startWith is start with deps (its logger and registry are the test's)
// and prepare, when given, called on the capture before it runs (a test's
// changes to it, export_test.go).
func startWith(t *testing.T, cfg capture.Config, deps capture.Deps, prepare func(*capture.Capture)) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	deps.Log, deps.Registerer = testenv.Logger(t), reg
	c, err := capture.New(cfg, deps)
	if err != nil {
		t.Fatalf("capture.New: %v", err)
	}
	if prepare != nil {
		prepare(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, reg: reg, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { _ = r.wait(t) })
	return r
}

// wait stops the capture (ordered shutdown) and returns Run's error.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	r.stop()
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(60 * time.Second):
		t.Fatalf("capture did not shut down within 60s")
		return nil
	}
}

func (r *running) waitReady(t *testing.T) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "capture ready and streaming", func() error {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("capture exited: %v", err)
		default:
		}
		if !r.c.Active() {
			return errors.New("capture not streaming")
		}
		return r.c.Ready(context.Background())
	})
}

// record is one Kafka record, decoded.
type record struct {
	partition int32
	offset    int64
	key       string
	ev        schema.Event
}

// readTopic reads every record of topic up to its current end.
func readTopic(t *testing.T, brokers []string, topic string) []record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ends, err := kadm.NewClient(adm).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("end offsets: %v", err)
	}
	want := map[int32]int64{}
	offsets := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			offsets[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	if len(want) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.FetchMaxBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v (still want %v)", topic, ctx.Err(), want)
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("fetch: %v", fe.Err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := schema.Decode(r.Value)
			if err != nil {
				t.Fatalf("record %d/%d: %v: %s", r.Partition, r.Offset, err, r.Value)
			}
			out = append(out, record{partition: r.Partition, offset: r.Offset, key: string(r.Key), ev: ev})
			if end, ok := want[r.Partition]; ok && r.Offset >= end-1 {
				delete(want, r.Partition)
			}
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].partition != out[j].partition {
			return out[i].partition < out[j].partition
		}
		return out[i].offset < out[j].offset
	})
	return out
}

// keyPartition is where the relay's partitioner puts an item key (Java's
// murmur2, proven against Kafka's vectors in relay's tests).
func keyPartition(key string, n int) int32 {
	return int32(relay.Partitioner().ForTopic("").Partition(&kgo.Record{Key: []byte(key)}, n))
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func exec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// slotLSN is the slot's confirmed_flush_lsn (0 if the slot is missing).
func slotLSN(t *testing.T, conn *pgx.Conn, slot string) schema.LSN {
	t.Helper()
	var s *string
	err := conn.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) || s == nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := schema.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// kv is a committed (key, version).
type kv struct {
	key     string
	version int64
}

// changesByKey indexes the change records of a topic read.
func changesByKey(recs []record) map[string][]record {
	m := map[string][]record{}
	for _, r := range recs {
		if c, ok := r.ev.(*schema.Change); ok && c.Op != schema.OpTruncate {
			m[c.Key()] = append(m[c.Key()], r)
		}
	}
	return m
}

// missing lists committed versions not in the topic.
func missing(recs []record, committed []kv) []string {
	have := map[kv]bool{}
	for _, r := range recs {
		if c, ok := r.ev.(*schema.Change); ok {
			have[kv{c.Key(), c.Version}] = true
		}
	}
	var out []string
	for _, c := range committed {
		if !have[c] {
			out = append(out, fmt.Sprintf("%s@%d", c.key, c.version))
		}
	}
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... %d in all", len(out)))
	}
	return out
}

func joinErr(list []string) error {
	if len(list) == 0 {
		return nil
	}
	return errors.New(strings.Join(list, ", "))
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
