// Package applier consumes the invalidation topic and applies it to the
// cache tier: one worker per partition batches, dedupes and applies records,
// commits offsets only for records whose effect is in Redis, publishes the
// partition watermark at resolved markers, sends bad records to the DLQ,
// survives Redis outages and failovers, and re-applies history on demand
// (Replay). docs/design.md, "Freshness watermark" and "Failure model", is
// the contract.
//
// Faults. A record leaves its partition only when its effect, or a safe
// substitute (the key purged, reset_at raised), is in Redis. Only records no
// Redis state could accept (undecodable, unknown schema) go to the DLQ; a
// key whose stored value refuses the write (WRONGTYPE, a script error on its
// fields) is purged and invalidated again; every other error (OOM,
// NOREPLICAS, MISCONF, READONLY, BUSY, LOADING, an unknown one...) is
// retried with capped backoff while the partition holds: its offset and
// watermark do not move. A held partition publishes a Stall note as the
// metadata of its committed offset, which `tidemark status` shows, and
// tidemark_applier_partition_stalled_seconds.
//
// The cache tier's identity (run_id and replication id of every master) is
// stored in the watermark hash with every watermark write. An applier that
// starts and finds it different from the live one, or the hash missing
// while its group has committed offsets, sets reset_at = now and rewinds its
// partitions by the hard lifetime before consuming; a running applier does
// the same when the identity changes or the hash vanishes. A partition whose
// end offset is below its committed offset (the broker lost records) is a
// gap: reset_at = now, rewind, tidemark_applier_gaps_total.
package applier

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/promise"
)

// Cache is what the applier needs from the cache tier (*cache.Client).
type Cache interface {
	InvalidateBatch(ctx context.Context, batch []cache.Invalidation) ([]cache.InvalidateOutcome, error)
	Purge(ctx context.Context, tenant, item string) error
	// SetWatermarkFrom refuses (cache.ErrWatermarkIdentity) unless the
	// hash holds identity, which BindWatermarkIdentity bound (failover.go),
	// and records the marker's source beside the partition's watermark.
	SetWatermarkFrom(ctx context.Context, partition int32, ts time.Time, identity, source string) error
	BindWatermarkIdentity(ctx context.Context, server string) (string, error)
	SetPartitions(ctx context.Context, n int) error
	// MarkGap raises reset_at to at + promise.ResetMargin; MarkGapNow does so
	// at the cache tier's clock. Both return the reset_at stored.
	MarkGap(ctx context.Context, at time.Time) (time.Time, error)
	MarkGapNow(ctx context.Context) (time.Time, error)
	ReadWatermark(ctx context.Context) (cache.Watermark, error)
	// Namespace is the tier's key prefix: the namespace every commit of
	// the group carries (group.go).
	Namespace() string
	// ClaimIdentity binds the namespace to this applier's group (group.go).
	ClaimIdentity(ctx context.Context, id cache.Identity) error
	ServerIdentity(ctx context.Context) (string, error)
	CheckEvictionPolicy(ctx context.Context) error
}

// Deps are the applier's collaborators.
type Deps struct {
	Cache      Cache
	Log        *slog.Logger
	Registerer prometheus.Registerer
	// Tracer continues the trace of each sampled change (its record's
	// traceparent header) with its application and INVALIDATE; nil: no
	// tracing.
	Tracer trace.TracerProvider
}

// checked applies the rule every package follows for nil dependencies
// (docs/design.md, "Lifecycle and shutdown order"): a nil Log discards, a
// nil Registerer is a private registry (metrics counted, not exposed); the
// cache tier is required.
func (d Deps) checked() (Deps, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Registerer == nil {
		d.Registerer = prometheus.NewRegistry()
	}
	if d.Cache == nil {
		return d, errors.New("applier: Deps.Cache is nil")
	}
	return d, nil
}

// MaxIdentityInterval bounds Config.IdentityInterval.
const MaxIdentityInterval = time.Second

// Config of the group applier (tidemark apply).
type Config struct {
	Brokers        []string
	Kafka          kafkaconn.Config // TLS and SASL
	Topic          string
	DLQTopic       string        // <topic>.dlq when empty
	Group          string        // empty: GroupFor(the cache tier's namespace)
	SessionTimeout time.Duration // how fast a dead applier's partitions move

	MaxBatch int           // records per InvalidateBatch
	Linger   time.Duration // how long a worker waits for more records to fill a batch (0: apply what has arrived)
	MaxQueue int           // records queued per partition before its fetching pauses

	CommitInterval   time.Duration // how often applied offsets are committed
	IdentityInterval time.Duration // how often the cache tier's identity is checked (failover detection)
	MetricsInterval  time.Duration // how often watermark/lag gauges are refreshed
	TopicInterval    time.Duration // how often the topic's partition count is re-read (also the group's metadata max age)

	BackoffMin time.Duration // first retry delay when Redis or Kafka fails
	BackoffMax time.Duration // retry delay cap
}

// DefaultConfig is what `tidemark apply` runs with (brokers aside).
func DefaultConfig() Config {
	return Config{
		Topic:            promise.Topic,
		Group:            "", // follows the namespace: GroupFor
		SessionTimeout:   6 * time.Second,
		MaxBatch:         500,
		Linger:           0, // records arriving during an apply form the next batch: batching costs no latency
		MaxQueue:         50000,
		CommitInterval:   time.Second,
		IdentityInterval: 500 * time.Millisecond,
		MetricsInterval:  time.Second,
		TopicInterval:    5 * time.Second,
		BackoffMin:       50 * time.Millisecond,
		BackoffMax:       5 * time.Second,
	}
}

// dlqTopic is where bad records go.
func (c Config) dlqTopic() string {
	if c.DLQTopic != "" {
		return c.DLQTopic
	}
	return c.Topic + ".dlq"
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if len(c.Brokers) == 0 {
		p.Add("Brokers", "is required (host:port list)")
	}
	p.Nested("Kafka", c.Kafka.Validate())
	if c.Topic == "" {
		p.Add("Topic", "must not be empty")
	}
	if strings.TrimSpace(c.Group) != c.Group {
		p.Add("Group", "must not start or end with spaces (got %q)", c.Group)
	}
	if c.SessionTimeout < time.Second || c.SessionTimeout > 5*time.Minute {
		p.Add("SessionTimeout", "must be between 1s and 5m (got %s)", c.SessionTimeout)
	}
	if c.MaxBatch < 1 {
		p.Add("MaxBatch", "must be at least 1 (got %d)", c.MaxBatch)
	}
	if c.Linger < 0 {
		p.Add("Linger", "must not be negative (got %s)", c.Linger)
	}
	if c.MaxQueue < c.MaxBatch {
		p.Add("MaxQueue", "must be at least the batch size %d (got %d)", c.MaxBatch, c.MaxQueue)
	}
	p.Positive("CommitInterval", c.CommitInterval)
	// A Cluster master failing over beside the watermark's loses floors the
	// watermark then extends entries past until this check finds it (the
	// watermark's own master is caught at its next write): it must come
	// well inside the promise, after the Cluster's own failover time.
	if c.IdentityInterval <= 0 || c.IdentityInterval > MaxIdentityInterval {
		p.Add("IdentityInterval", "must be above 0 and at most %s (got %s)", MaxIdentityInterval, c.IdentityInterval)
	}
	p.Positive("MetricsInterval", c.MetricsInterval)
	if c.TopicInterval < time.Second || c.TopicInterval > time.Minute {
		// kgo's metadata max age may not be under its 1 s minimum age.
		p.Add("TopicInterval", "must be between 1s and 1m (got %s)", c.TopicInterval)
	}
	p.Positive("BackoffMin", c.BackoffMin)
	if c.BackoffMax < c.BackoffMin {
		p.Add("BackoffMax", "must be at least the minimum backoff %s (got %s)", c.BackoffMin, c.BackoffMax)
	}
	return p.Err()
}
