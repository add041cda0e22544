// Package relay is the Kafka side of capture: an idempotent franz-go producer
// with Java-compatible key partitioning, bounded in-flight records, and an
// in-order tracker that reports the LSN that is safe to confirm to Postgres.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/telemetry"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

// ErrProduce wraps a record Kafka refused for good (retriable errors are
// retried forever and never surface).
var ErrProduce = errors.New("relay: produce failed")

// ErrDataLoss is Kafka telling the idempotent producer that records it had
// acknowledged are gone (an out-of-order sequence number or an unknown
// producer ID: an unclean leader election, a truncated log). The client
// stops producing (every buffered record fails, so nothing after the loss
// is acknowledged) and is rebuilt by Renew. Not fatal: the caller holds
// what it has not confirmed, marks a gap for what it may have, and
// resumes from what it confirmed.
var ErrDataLoss = errors.New("relay: kafka lost acknowledged records")

// ErrTopicView is a marker sent to a partition the client's view of the
// topic does not have yet (the topic grew and the view is older than the
// count read by Topic). Not fatal: nothing after it is confirmed, and the
// next session starts with a refreshed view.
var ErrTopicView = errors.New("relay: marker for a partition the client does not know yet")

// Config of the producer.
type Config struct {
	Brokers     []string
	Kafka       kafkaconn.Config // TLS and SASL
	Topic       string
	Partitions  int           // partitions of a topic this creates
	CreateTopic bool          // create the topic when missing
	MaxInflight int           // records handed to Kafka and not yet acked
	Linger      time.Duration // producer linger; small keeps commit-to-produced latency low
	ClientID    string
	// Require is what an existing topic's configuration must provide
	// (checked before streaming); zero means DefaultTopicRequirements.
	Require TopicRequirements
	// TopicRefresh bounds the age of the producer's view of the topic
	// (kgo's metadata max age): partitions an operator adds are routed to,
	// and marked, within about this long.
	TopicRefresh time.Duration
}

// DefaultConfig matches tidemark capture's defaults.
func DefaultConfig() Config {
	return Config{
		Topic:        promise.Topic,
		Partitions:   12,
		CreateTopic:  true,
		MaxInflight:  20000,
		Linger:       time.Millisecond,
		ClientID:     "tidemark-capture",
		TopicRefresh: 5 * time.Second,
	}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if len(c.Brokers) == 0 {
		p.Add("Brokers", "is required (host:port list)")
	}
	p.Nested("Kafka", c.Kafka.Validate())
	if strings.TrimSpace(c.Topic) == "" {
		p.Add("Topic", "must not be empty")
	}
	if c.Partitions < 1 {
		p.Add("Partitions", "must be at least 1 (got %d)", c.Partitions)
	}
	if c.MaxInflight < 1 {
		p.Add("MaxInflight", "must be at least 1 (got %d)", c.MaxInflight)
	}
	if c.Linger < 0 {
		p.Add("Linger", "must not be negative (got %s)", c.Linger)
	}
	if c.TopicRefresh < time.Second || c.TopicRefresh > time.Minute {
		// kgo refuses a metadata max age under its 1 s minimum age; over a
		// minute, a grown topic leaves the watermark unknown for as long.
		p.Add("TopicRefresh", "must be between 1s and 1m (got %s)", c.TopicRefresh)
	}
	if c.Require != (TopicRequirements{}) { // zero: DefaultTopicRequirements
		if c.Require.ReplicationFactor < 1 {
			p.Add("Require.ReplicationFactor", "must be at least 1 (got %d)", c.Require.ReplicationFactor)
		}
		if c.Require.MinInsync < 1 {
			p.Add("Require.MinInsync", "must be at least 1 (got %d)", c.Require.MinInsync)
		}
		if c.Require.Retention < MinRetention {
			p.Add("Require.Retention", "must be at least %s (got %s): a reset marker compacted away sooner, or records deleted sooner, can be missed by an applier lagging less than an entry's hard lifetime",
				MinRetention, c.Require.Retention)
		}
	}
	return p.Err()
}

// Deps are what the producer is given.
type Deps struct {
	Log        *slog.Logger
	Registerer prometheus.Registerer
	// Opts are extra franz-go options (tests, benchmarks).
	Opts []kgo.Opt
	// OnProduced, if set, sees every acked change's commit-to-produced
	// latency (benchmarks want exact quantiles, not histogram buckets).
	OnProduced func(time.Duration)
	// Tracer records the produce span of sampled changes (ProduceTraced);
	// nil: no tracing.
	Tracer trace.TracerProvider
}

// Producer sends capture's records to Kafka.
type Producer struct {
	cfg    Config
	log    *slog.Logger
	client *kgo.Client
	m      *metrics
	onAck  func(time.Duration)
	tracer trace.Tracer

	opts []kgo.Opt // how client was built, for Renew
	sess atomic.Pointer[session]
	// lost is set once the client saw a data loss: it produces nothing
	// more and must be renewed.
	lost atomic.Bool
	// viewShort is set when a marker named a partition beyond the count
	// its record was placed with.
	viewShort atomic.Bool

	// routed is the largest partition count of the data topic the
	// partitioner has placed a record with: every record sent so far went
	// to a partition below it.
	routed atomic.Int32
	// unplaced counts records Produce handed to kgo that its partitioner
	// has not placed yet: kgo buffers the records of a topic whose
	// partitions it has not loaded (a new client's first ones) and places
	// them once they load, with the count loaded then, which may exceed
	// the count Topic read if the topic grew in between.
	unplaced atomic.Int64
}

// placedKey holds, in a record's context, whether the partitioner has
// placed it (or its promise ran first).
type placedKey struct{}

// placed marks r placed, once; false if it was already.
func (p *Producer) placed(r *kgo.Record) {
	if r.Context == nil {
		return
	}
	if f, ok := r.Context.Value(placedKey{}).(*atomic.Bool); ok && f.CompareAndSwap(false, true) {
		p.unplaced.Add(-1)
	}
}

// New builds the client; it connects lazily.
func New(cfg Config, deps Deps) (*Producer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Registerer == nil {
		deps.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(deps.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Producer{cfg: cfg, log: deps.Log.With("component", "relay"), m: m, onAck: deps.OnProduced,
		tracer: telemetry.Tracer(deps.Tracer, "relay")}
	p.sess.Store(newSession())
	opts, err := ClientOpts(cfg, p.log)
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.RecordPartitioner(partitioner(func(topic string, r *kgo.Record, n int) {
			if topic != cfg.Topic {
				return
			}
			if schema.IsMarkerKey(string(r.Key)) && int(r.Partition) >= n {
				p.viewShort.Store(true) // kgo fails the record; its callback says why
			}
			for cur := p.routed.Load(); int32(n) > cur && !p.routed.CompareAndSwap(cur, int32(n)); cur = p.routed.Load() {
			}
			p.placed(r) // after routed: Placed then covers its partition
		})),
		kgo.WithHooks(hookErrors{m}),
	)
	p.opts = append(opts, deps.Opts...)
	if p.client, err = kgo.NewClient(p.opts...); err != nil {
		return nil, fmt.Errorf("relay: kafka client: %w", err)
	}
	return p, nil
}

// ClientOpts are the franz-go options of the producer that do not depend
// on a Producer (its partitioner and hooks do): the connection (TLS, SASL),
// acks from every in-sync replica, the stop on data loss, the linger, the
// buffer bound and the metadata ages. cfg must be valid (Config.Validate).
// `tidemark-lab bench hop` builds its producer from them, so the hop it
// measures is the one capture's records take.
func ClientOpts(cfg Config, log *slog.Logger) ([]kgo.Opt, error) {
	opts, err := kafkaconn.Opts(cfg.Brokers, cfg.Kafka, log)
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	return append(opts,
		kgo.ClientID(cfg.ClientID),
		kgo.DefaultProduceTopic(cfg.Topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Records Kafka acknowledged and then lost must not be followed by
		// acknowledged ones: kgo's default bumps the producer epoch and
		// carries on, so nothing would tell the tracker.
		kgo.StopProducerOnDataLossDetected(),
		kgo.ProducerLinger(cfg.Linger),
		// Capture bounds in-flight records itself (so it can keep sending
		// standby status while paused); the margin covers one marker fan-out.
		kgo.MaxBufferedRecords(cfg.MaxInflight+4096),
		// After a broker dies its partitions get new leaders within the
		// cluster's broker session timeout; kgo's default 5 s floor between
		// metadata refreshes would add up to that much again to the stall.
		kgo.MetadataMinAge(time.Second),
		kgo.MetadataMaxAge(cfg.TopicRefresh),
	), nil
}

// session is one capture session's error delivery: the first record Kafka
// refused since Renew.
type session struct {
	once sync.Once
	ch   chan error
}

func newSession() *session { return &session{ch: make(chan error, 1)} }

// Renew starts a new session (Err delivers afresh) and, after a data loss,
// replaces the client, which kgo has stopped. Call it between sessions,
// with nothing in flight.
func (p *Producer) Renew() error {
	p.sess.Store(newSession())
	p.viewShort.Store(false)
	if !p.lost.Load() {
		p.client.ForceMetadataRefresh() // a grown topic's partitions, before its markers
		return nil
	}
	cl, err := kgo.NewClient(p.opts...)
	if err != nil {
		return fmt.Errorf("relay: kafka client: %w", err)
	}
	p.client.Close()
	p.client = cl
	p.lost.Store(false)
	p.log.Info("kafka client renewed after a data loss")
	return nil
}

// Partitioner places item records by Kafka's murmur2 of the key, exactly as
// the Java client does, and marker records (resolved, reset, truncate) on
// the partition they name, since they go to every partition.
func Partitioner() kgo.Partitioner { return partitioner(nil) }

// partitioner is Partitioner telling observe (if set) the partition count
// each record was placed with.
func partitioner(observe func(topic string, r *kgo.Record, n int)) kgo.Partitioner {
	return kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		byKey := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
		return func(r *kgo.Record, n int) int {
			if observe != nil {
				observe(topic, r, n)
			}
			if schema.IsMarkerKey(string(r.Key)) {
				return int(r.Partition)
			}
			return byKey.Partition(r, n)
		}
	})
}

// Routed is the largest partition count of the data topic a record was
// placed with so far (0 before the first). kgo places a record when it is
// produced (the topic's partitions being known), so once Produce returns,
// Routed covers that record's partition: markers sent to every partition
// below max(Routed, the count Topic read) cover every record sent before
// them, also while the topic grows.
func (p *Producer) Routed() int { return int(p.routed.Load()) }

// Placed waits until every record produced so far has been placed, then
// returns Routed. Right after Produce a record may not be placed yet (kgo
// waits for the topic's partitions on a client's first records); a marker
// fanned out to fewer partitions than such a record lands on would vouch
// for a partition it did not reach.
func (p *Producer) Placed(ctx context.Context) (int, error) {
	for d := 100 * time.Microsecond; p.unplaced.Load() > 0; d = min(2*d, 20*time.Millisecond) {
		select {
		case <-ctx.Done():
			return p.Routed(), fmt.Errorf("relay: records not yet placed on a partition: %w", ctx.Err())
		case <-time.After(d):
		}
	}
	return p.Routed(), nil
}

// Client is the underlying franz-go client (for admin requests).
func (p *Producer) Client() *kgo.Client { return p.client }

func (p *Producer) require() TopicRequirements {
	if p.cfg.Require == (TopicRequirements{}) {
		return DefaultTopicRequirements()
	}
	return p.cfg.Require
}

// Err delivers the first record Kafka refused for good since Renew.
func (p *Producer) Err() <-chan error { return p.sess.Load().ch }

// Topic describes the topic: partition count and whether it holds any
// record. It creates the topic when missing and allowed
// (cleanup.policy=compact,delete, replicated as Require asks, as far as the
// cluster's brokers allow, min.compaction.lag.ms = Require.Retention), and checks an existing topic's configuration
// (CheckTopic).
func (p *Producer) Topic(ctx context.Context) (partitions int, hasHistory bool, err error) {
	adm := kadm.NewClient(p.client)
	req := p.require()
	td, err := adm.ListTopics(ctx, p.cfg.Topic)
	if err != nil {
		return 0, false, fmt.Errorf("relay: describe topic %s: %w", p.cfg.Topic, err)
	}
	t, ok := td[p.cfg.Topic]
	if !ok || errors.Is(t.Err, kerr.UnknownTopicOrPartition) {
		if !p.cfg.CreateTopic {
			return 0, false, fmt.Errorf("relay: topic %s does not exist: create it (cleanup.policy=compact,delete) or allow capture to", p.cfg.Topic)
		}
		brokers, err := adm.ListBrokers(ctx)
		if err != nil {
			return 0, false, fmt.Errorf("relay: list brokers: %w", err)
		}
		rf := max(1, min(req.ReplicationFactor, len(brokers)))
		policy, insync := "compact,delete", strconv.Itoa(min(req.MinInsync, rf))
		lag := strconv.FormatInt(req.Retention.Milliseconds(), 10)
		resp, err := adm.CreateTopic(ctx, int32(p.cfg.Partitions), int16(rf),
			map[string]*string{"cleanup.policy": &policy, "min.insync.replicas": &insync, "min.compaction.lag.ms": &lag}, p.cfg.Topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return 0, false, fmt.Errorf("relay: create topic %s: %w", p.cfg.Topic, err)
		}
		p.log.Info("created topic", "topic", p.cfg.Topic, "partitions", p.cfg.Partitions, "replication_factor", rf)
		// New topic: no history. (Re-listing could hit cached metadata.)
		return p.cfg.Partitions, false, nil
	}
	if t.Err != nil {
		return 0, false, fmt.Errorf("relay: describe topic %s: %w", p.cfg.Topic, t.Err)
	}
	if err := p.CheckTopic(ctx, req); err != nil {
		return 0, false, err
	}
	ends, err := adm.ListEndOffsets(ctx, p.cfg.Topic)
	if err != nil {
		return 0, false, fmt.Errorf("relay: end offsets of %s: %w", p.cfg.Topic, err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			hasHistory = true
		}
	})
	if err := ends.Error(); err != nil {
		return 0, false, fmt.Errorf("relay: end offsets of %s: %w", p.cfg.Topic, err)
	}
	return len(t.Partitions), hasHistory, nil
}

// Produce hands one record of transaction x to Kafka; it never blocks for
// long because the caller keeps Inflight below MaxInflight. commitTime,
// when set, feeds the commit-to-produced histogram.
//
// Records are produced with a background context on purpose: a record's
// context can cancel it before it is sent, and shutdown must flush, not
// cancel, what was handed over.
func (p *Producer) Produce(tr *Tracker, x *Txn, key string, partition int32, value []byte, commitTime time.Time) {
	p.produce(tr, x, &kgo.Record{Key: []byte(key), Value: value, Partition: partition}, commitTime, nil)
}

// ProduceTraced is Produce for a change whose span is in ctx: when that
// span is sampled, the record is sent under a child "kafka.produce" span
// that ends when Kafka acknowledges it, and the span's context travels in
// the record's headers (W3C traceparent), so the applier continues the
// trace. ctx carries only the trace: the record is never cancelled by it.
func (p *Producer) ProduceTraced(ctx context.Context, tr *Tracker, x *Txn, key string, partition int32, value []byte, commitTime time.Time) {
	r := &kgo.Record{Key: []byte(key), Value: value, Partition: partition}
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		p.produce(tr, x, r, commitTime, nil)
		return
	}
	ctx, span := p.tracer.Start(ctx, "kafka.produce", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.destination.name", p.cfg.Topic),
			attribute.String("messaging.kafka.message.key", key)))
	telemetry.Propagator.Inject(ctx, kotel.NewRecordCarrier(r))
	p.produce(tr, x, r, commitTime, span)
}

func (p *Producer) produce(tr *Tracker, x *Txn, r *kgo.Record, commitTime time.Time, span trace.Span) {
	tr.Add(x)
	p.m.inflightN.Add(1)
	s := p.sess.Load()
	key, partition := string(r.Key), r.Partition
	if r.Context == nil {
		r.Context = context.Background()
	}
	r.Context = context.WithValue(r.Context, placedKey{}, new(atomic.Bool))
	p.unplaced.Add(1)
	p.client.Produce(context.Background(), r, func(r *kgo.Record, err error) {
		p.placed(r) // a record that failed before it was placed
		p.m.inflightN.Add(-1)
		if span != nil {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			} else {
				span.SetAttributes(attribute.Int("messaging.destination.partition.id", int(r.Partition)), attribute.Int64("messaging.kafka.offset", r.Offset))
			}
			span.End()
		}
		if err != nil {
			// Not acked: the tracker keeps x pending, so its LSN is never
			// confirmed; capture stops (or, for the two below, ends the
			// session) on the error.
			p.m.errors.Inc()
			switch {
			case errors.Is(err, kerr.OutOfOrderSequenceNumber) || errors.Is(err, kerr.UnknownProducerID):
				p.lost.Store(true)
				p.m.dataLoss.Inc()
				p.fail(s, fmt.Errorf("%w: partition %d: %v", ErrDataLoss, partition, err))
			case p.lost.Load():
				// Failed because the client stopped at the loss.
				p.fail(s, fmt.Errorf("%w: %v", ErrDataLoss, err))
			case p.viewShort.Load() && schema.IsMarkerKey(key):
				p.fail(s, fmt.Errorf("%w: partition %d: %v", ErrTopicView, partition, err))
			default:
				p.fail(s, fmt.Errorf("%w: %v", ErrProduce, err))
			}
			return
		}
		p.m.produced.Inc()
		if !commitTime.IsZero() {
			d := time.Since(commitTime)
			p.m.latency.Observe(d.Seconds())
			if p.onAck != nil {
				p.onAck(d)
			}
		}
		tr.Ack(x)
	})
}

func (p *Producer) fail(s *session, err error) {
	s.once.Do(func() {
		p.log.Error("kafka refused a record; stopping without confirming it", "err", err)
		s.ch <- err
	})
}

// Flush waits until every buffered record is acked or ctx ends.
func (p *Producer) Flush(ctx context.Context) error {
	if err := p.client.Flush(ctx); err != nil {
		return fmt.Errorf("relay: flush: %w", err)
	}
	return nil
}

// Close closes the client; unflushed records fail (and are never confirmed).
func (p *Producer) Close() { p.client.Close() }

type metrics struct {
	produced  prometheus.Counter
	errors    prometheus.Counter
	dataLoss  prometheus.Counter
	inflight  prometheus.GaugeFunc
	inflightN atomic.Int64 // an atomic add per record is cheaper than a float gauge's CAS loop
	latency   prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewExclusiveInstruments(reg)
	m := &metrics{
		produced: in.Counter("tidemark_relay_records_produced_total", "Records Kafka acknowledged."),
		errors:   in.Counter("tidemark_relay_produce_errors_total", "Produce errors: failed records and failed produce requests (retried)."),
		dataLoss: in.Counter("tidemark_relay_data_loss_total", "Times Kafka reported records it had acknowledged as lost (out-of-order sequence or unknown producer ID); each is a gap."),
	}
	m.inflight = in.GaugeFunc("tidemark_relay_inflight_records", "Records handed to the producer and not yet acknowledged.",
		func() float64 { return float64(m.inflightN.Load()) })
	m.latency = in.Histogram("tidemark_capture_commit_to_produced_seconds",
		"From a transaction's commit time to Kafka acknowledging its record.",
		[]float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30})
	if err := in.Err(); err != nil {
		return nil, fmt.Errorf("relay: register metrics: %w", err)
	}
	return m, nil
}

// hookErrors counts produce requests that failed in flight (kgo retries
// them): an unreachable Kafka shows up in the error counter at once.
type hookErrors struct{ m *metrics }

func (h hookErrors) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err != nil && key == 0 {
		h.m.errors.Inc()
	}
}

var _ kgo.HookBrokerWrite = hookErrors{}
