package e2ebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/schema"
)

// sample is one change's latency, keyed by its commit time (for windows).
type sample struct {
	commit time.Time
	d      time.Duration
}

// observer pairs every change of the current phase's tenant with when the
// bench read it back from Kafka (produced) and when Redis announced the
// applier's write to its key (applied). A notification may overtake the
// bench's own read of the record, so either side may wait for the other;
// each key is touched at most once per cycle of a phase's rows, so per key
// the two sides pair up in order.
type observer struct {
	ns     string
	suffix string // only keys whose item ends with it are timed (Config.ObserveEvery)

	mu       sync.Mutex
	tenant   string
	handed   []sample // commit → capture handed it to its producer (the record's timestamp)
	produced []sample
	applied  []sample
	pending  map[string][]time.Time // Redis key -> commit times not yet applied
	early    map[string][]time.Time // Redis key -> notifications ahead of their record
	errs     []error
}

// newObserver times the changes to rows whose number is a multiple of
// every (a power of ten: their item IDs end in as many zeros).
func newObserver(ns string, every int) *observer {
	suffix := ""
	for n := every; n > 1; n /= 10 {
		suffix += "0"
	}
	return &observer{ns: ns, suffix: suffix}
}

// begin starts recording tenant's changes, discarding everything before.
func (o *observer) begin(tenant string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tenant, o.handed, o.produced, o.applied = tenant, nil, nil, nil
	o.pending, o.early = map[string][]time.Time{}, map[string][]time.Time{}
}

// counts is how many changes were seen produced and applied so far.
func (o *observer) counts() (produced, applied int, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.produced), len(o.applied), errors.Join(o.errs...)
}

// end stops recording and returns the samples.
func (o *observer) end() (handed, produced, applied []sample) {
	o.mu.Lock()
	defer o.mu.Unlock()
	handed, produced, applied = o.handed, o.produced, o.applied
	o.tenant, o.handed, o.produced, o.applied, o.pending, o.early = "", nil, nil, nil, nil, nil
	return handed, produced, applied
}

// onRecord takes a record read back from Kafka at at; ts is the record's
// timestamp, which the producer sets when capture hands it the record (to
// the millisecond, as Kafka stores it).
func (o *observer) onRecord(key, value []byte, ts, at time.Time) {
	// Items not timed are skipped before decoding (marker keys too: they
	// are not changes).
	if !bytes.HasSuffix(key, []byte(o.suffix)) {
		return
	}
	ev, err := schema.Decode(value)
	if err != nil {
		o.mu.Lock()
		o.errs = append(o.errs, fmt.Errorf("bench e2e: a record on the topic does not decode: %w", err))
		o.mu.Unlock()
		return
	}
	c, ok := ev.(*schema.Change)
	if !ok {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if c.Tenant != o.tenant || o.tenant == "" {
		return
	}
	o.handed = append(o.handed, sample{c.CommitTime, ts.Sub(c.CommitTime)})
	o.produced = append(o.produced, sample{c.CommitTime, at.Sub(c.CommitTime)})
	rk := schema.RedisKey(o.ns, c.Tenant, c.Item)
	if q := o.early[rk]; len(q) > 0 {
		o.applied = append(o.applied, sample{c.CommitTime, q[0].Sub(c.CommitTime)})
		o.early[rk] = q[1:]
		return
	}
	o.pending[rk] = append(o.pending[rk], c.CommitTime)
}

func (o *observer) onNotify(rk string, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tenant == "" {
		return
	}
	if q := o.pending[rk]; len(q) > 0 {
		o.applied = append(o.applied, sample{q[0], at.Sub(q[0])})
		o.pending[rk] = q[1:]
		return
	}
	if tenant, _, err := schema.ParseRedisKey(o.ns, rk); err == nil && tenant == o.tenant {
		o.early[rk] = append(o.early[rk], at)
	}
}

// consume reads the topic from the start until ctx ends.
func (o *observer) consume(ctx context.Context, brokers []string, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("bench e2e: kafka consumer: %w", err)
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		at := time.Now()
		fs.EachError(func(t string, p int32, err error) {
			o.mu.Lock()
			o.errs = append(o.errs, fmt.Errorf("bench e2e: fetch %s/%d: %w", t, p, err))
			o.mu.Unlock()
		})
		fs.EachRecord(func(r *kgo.Record) { o.onRecord(r.Key, r.Value, r.Timestamp, at) })
	}
}

// subscribe turns on hash keyspace notifications and listens to the
// namespace's keys until ctx ends; ready is closed once subscribed.
func (o *observer) subscribe(ctx context.Context, rdb *redis.Client, ready chan<- struct{}) error {
	if err := rdb.ConfigSet(ctx, "notify-keyspace-events", "Kh").Err(); err != nil {
		return fmt.Errorf("bench e2e: enable keyspace notifications: %w", err)
	}
	prefix := "__keyspace@0__:"
	// Redis sends only the timed keys' notifications (schema.RedisKey ends
	// the item in "}").
	ps := rdb.PSubscribe(ctx, prefix+o.ns+":v1:*"+o.suffix+"}")
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		return fmt.Errorf("bench e2e: subscribe: %w", err)
	}
	close(ready)
	// ReceiveMessage blocks on the connection, whatever its context says.
	stop := context.AfterFunc(ctx, func() { ps.Close() })
	defer stop()
	for {
		m, err := ps.ReceiveMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("bench e2e: keyspace notifications: %w", err)
		}
		if m.Payload == "hset" {
			o.onNotify(strings.TrimPrefix(m.Channel, prefix), time.Now())
		}
	}
}
