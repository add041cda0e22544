// Package hopbench is the broker-hop benchmark (`tidemark-lab bench hop`):
// what one Kafka hop costs alone, with capture's producer settings (acks
// from every in-sync replica, idempotent, its linger) and the applier's
// fetch wait, at a steady record rate. bench e2e measures the hop inside
// the whole pipeline, where Postgres, pgbench and the stages share the box
// with the broker; this one runs nothing else, so the two together say how
// much of e2e's hop is the broker and how much the box's contention. One
// arm per producer linger, on the same broker, one after the other.
package hopbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/lab/bench"
	"github.com/tidemark/tidemark/relay"
)

// Config of one run.
type Config struct {
	Brokers    []string        // the Kafka cluster (host:port), plaintext
	Rate       int             // records per second, open loop
	Warmup     time.Duration   // sent at the rate before each arm's timed records (topic leaders, consumer start)
	Duration   time.Duration   // length of each arm's timed part
	Partitions int             // partitions of each arm's new topic
	Lingers    []time.Duration // one arm per producer linger
	FetchWait  time.Duration   // the consumer's fetch max wait (the applier's)
}

// DefaultConfig: the e2e bench's rate and partition count, capture's
// default linger and none.
func DefaultConfig() Config {
	return Config{Rate: 2000, Warmup: 3 * time.Second, Duration: 15 * time.Second, Partitions: 12,
		Lingers: []time.Duration{relay.DefaultConfig().Linger, 0}, FetchWait: 500 * time.Millisecond}
}

// Validate reports every problem at once, by field.
func (c Config) Validate() error {
	var p config.Problems
	if len(c.Brokers) == 0 {
		p.Add("Brokers", "name at least one broker (start one with `tidemark-lab kafka`)")
	}
	if c.Rate < 1 || c.Rate > 100_000 {
		p.Add("Rate", "must be between 1 and 100000 records/s (got %d)", c.Rate)
	}
	if c.Partitions < 1 {
		p.Add("Partitions", "must be positive (got %d)", c.Partitions)
	}
	if len(c.Lingers) == 0 {
		p.Add("Lingers", "must name at least one arm")
	}
	for _, l := range c.Lingers {
		if l < 0 {
			p.Add("Lingers", "must not be negative (got %s)", l)
		}
	}
	p.Positive("Duration", c.Duration)
	if c.Warmup < 0 {
		p.Add("Warmup", "must not be negative (got %s)", c.Warmup)
	}
	p.Positive("FetchWait", c.FetchWait)
	return p.Err()
}

// Arm is one linger's measurements: produce call → acknowledged, and
// produce call → read back by the consumer.
type Arm struct {
	Linger    time.Duration
	Sent      int
	Ack, Read bench.Latency
}

// Deps is what Run is given besides its Config.
type Deps = bench.Deps

// Result of a run.
type Result struct {
	Config Config
	Arms   []Arm
}

// Run measures every arm of cfg on its own new topic.
func Run(ctx context.Context, cfg Config, deps Deps) (Result, error) {
	deps = deps.OrDefaults()
	res := Result{Config: cfg}
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	stamp := time.Now().UnixNano()
	for i, linger := range cfg.Lingers {
		topic := fmt.Sprintf("tidemark-hop-%d-%d", stamp, i)
		fmt.Fprintf(deps.Progress, "linger %s: %d records/s for %s on %s ...\n", linger, cfg.Rate, cfg.Duration, topic)
		arm, err := runArm(ctx, cfg, deps.Log, topic, linger)
		if err != nil {
			return res, fmt.Errorf("hop bench: linger %s: %w", linger, err)
		}
		fmt.Fprintf(deps.Progress, "  ack p50 %s, read p50 %s p99 %s\n", bench.Ms(arm.Ack.P50), bench.Ms(arm.Read.P50), bench.Ms(arm.Read.P99))
		res.Arms = append(res.Arms, arm)
	}
	return res, nil
}

func runArm(ctx context.Context, cfg Config, log *slog.Logger, topic string, linger time.Duration) (Arm, error) {
	arm := Arm{Linger: linger}
	// Capture's producer options (relay.ClientOpts), with the arm's topic
	// and linger; the key partitioner is kgo's, murmur2 like relay's.
	rcfg := relay.DefaultConfig()
	rcfg.Brokers, rcfg.Topic, rcfg.Linger = cfg.Brokers, topic, linger
	if err := rcfg.Validate(); err != nil {
		return arm, err
	}
	opts, err := relay.ClientOpts(rcfg, log)
	if err != nil {
		return arm, err
	}
	prod, err := kgo.NewClient(opts...)
	if err != nil {
		return arm, err
	}
	defer prod.Close()
	adm := kadm.NewClient(prod)
	if _, err := adm.CreateTopic(ctx, int32(cfg.Partitions), -1, nil, topic); err != nil {
		return arm, fmt.Errorf("create topic %s: %w", topic, err)
	}
	// The arm's topic is the bench's own: it leaves nothing on the cluster.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, err := adm.DeleteTopic(dctx, topic); err != nil {
			log.Warn("hop bench: the arm's topic was not deleted", "topic", topic, "err", err)
		}
	}()
	cons, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(cfg.FetchWait))
	if err != nil {
		return arm, err
	}
	defer cons.Close()

	var mu sync.Mutex
	var acks, reads []time.Duration
	var failed error
	total := int(cfg.Duration.Seconds() * float64(cfg.Rate))
	readAll := make(chan struct{})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(readAll)
		for n := 0; n < total; {
			fs := cons.PollFetches(rctx)
			now := time.Now()
			if rctx.Err() != nil {
				return
			}
			fs.EachRecord(func(r *kgo.Record) {
				sent, err := strconv.ParseInt(string(r.Value), 10, 64)
				if err != nil {
					return // a warm-up record
				}
				n++
				mu.Lock()
				reads = append(reads, now.Sub(time.Unix(0, sent)))
				mu.Unlock()
			})
		}
	}()

	// Open loop at 1 ms resolution: each tick sends the records due by
	// then, each stamped with its own send time; the warm-up's records are
	// marked and not timed.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	warm := int(cfg.Warmup.Seconds() * float64(cfg.Rate))
	for sent := 0; sent < warm+total; {
		select {
		case <-ctx.Done():
			return arm, ctx.Err()
		case <-tick.C:
		}
		due := min(warm+total, int(time.Since(start).Seconds()*float64(cfg.Rate)))
		for ; sent < due; sent++ {
			t0 := time.Now()
			value := strconv.AppendInt(nil, t0.UnixNano(), 10)
			timed := sent >= warm
			if !timed {
				value = []byte("warm-up")
			} else {
				arm.Sent++
			}
			prod.Produce(ctx, &kgo.Record{Key: strconv.AppendInt(nil, int64(sent), 10), Value: value},
				func(_ *kgo.Record, err error) {
					d := time.Since(t0)
					mu.Lock()
					defer mu.Unlock()
					if err != nil && failed == nil {
						failed = err
					}
					if timed {
						acks = append(acks, d)
					}
				})
		}
	}
	if err := prod.Flush(ctx); err != nil {
		return arm, err
	}
	mu.Lock()
	err = failed // every record is acknowledged or failed after Flush
	mu.Unlock()
	if err != nil {
		return arm, fmt.Errorf("produce: %w", err)
	}
	select {
	case <-readAll:
	case <-time.After(30 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		return arm, fmt.Errorf("read back %d of %d records within 30 s of the last send", len(reads), total)
	case <-ctx.Done():
		return arm, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	arm.Ack, arm.Read = bench.Summarize(acks), bench.Summarize(reads)
	return arm, nil
}

// WriteTable writes the report: one row per arm.
func (r Result) WriteTable(w io.Writer) error {
	ew := &bench.ErrWriter{W: w}
	fmt.Fprintf(ew, "%d records/s for %s per arm after %s of warm-up, %d partitions, acks from all in-sync replicas, idempotent; consumer fetch wait %s; nothing else running from this bench\n\n",
		r.Config.Rate, r.Config.Duration, r.Config.Warmup, r.Config.Partitions, r.Config.FetchWait)
	t := bench.Table{Header: []string{"linger", "records", "produce → ack p50", "p99", "produce → read back p50", "p99", "max"}}
	for _, a := range r.Arms {
		t.Add(a.Linger.String(), strconv.Itoa(a.Sent), bench.Ms(a.Ack.P50), bench.Ms(a.Ack.P99), bench.Ms(a.Read.P50), bench.Ms(a.Read.P99), bench.Ms(a.Read.Max))
	}
	_, _ = t.WriteTo(ew)
	return ew.Err
}
