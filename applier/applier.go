package applier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/tidemark/internal/kafkaconn"
	"github.com/tidemark/tidemark/internal/lifecycle"
	"github.com/tidemark/tidemark/internal/telemetry"
)

// Applier is the group consumer behind `tidemark apply`.
//
// Shutdown order (when Run's context ends or a fatal error cancels it):
//  1. the poll loop stops fetching and allows the pending rebalance;
//  2. the committer and the monitor stop;
//  3. the Kafka client is closed: it leaves the group, which revokes every
//     partition, and the revoke stops each worker (an in-flight Redis retry
//     ends at once) and commits exactly what was applied;
//  4. Run returns the first fatal error, or nil.
type Applier struct {
	cfg   Config
	cache Cache
	ns    string // the cache tier's namespace, carried by every commit (group.go)
	log   *slog.Logger
	met   *metrics
	proc  processor

	counts  counters
	cancel  context.CancelCauseFunc
	cl      *kgo.Client
	adm     *kadm.Client
	rewindC chan time.Time // failover detections for the poll loop
	// identityKick asks monitorLoop to check the cache tier's identity now:
	// a watermark write was refused because the hash lost the identity
	// this applier bound (process.go).
	identityKick chan struct{}
	// growKick asks monitorLoop to read the topic's metadata again for a
	// while: a marker said the topic has more partitions (refreshTopic).
	growKick chan struct{}

	commitMu sync.Mutex // serialises the committer with revokes
	mu       sync.Mutex // guards workers
	workers  map[int32]*worker

	identity     atomic.Pointer[string] // watermark identity bound (cache.BindWatermarkIdentity), passed with every watermark
	identityOKAt atomic.Int64           // unix nanos of the last successful identity read
	partitions   atomic.Int64           // the topic's partition count, last read
	topicMissing atomic.Bool            // the last read found no topic (Ready)
	startRewind  time.Time              // set by preflight: rewind at the first assignment (a.mu)
	liveLoop     *telemetry.Loop        // beaten by metricsLoop, for Live
}

// New checks cfg and deps and registers the metrics.
func New(cfg Config, deps Deps) (*Applier, error) {
	deps, met, err := deps.setup(cfg)
	if err != nil {
		return nil, err
	}
	ns := deps.Cache.Namespace()
	if cfg.Group == "" {
		cfg.Group = GroupFor(ns)
	}
	a := &Applier{
		cfg:          cfg,
		ns:           ns,
		cache:        deps.Cache,
		log:          deps.Log.With("component", "applier"),
		met:          met,
		rewindC:      make(chan time.Time, 1),
		identityKick: make(chan struct{}, 1),
		growKick:     make(chan struct{}, 1),
		workers:      make(map[int32]*worker),
		// metricsLoop goes round every MetricsInterval unless a lock is stuck.
		liveLoop: telemetry.NewLoop("applier: state loop", 10*cfg.MetricsInterval+30*time.Second),
	}
	a.proc = processor{
		cache: a.cache, met: met, counts: &a.counts, log: a.log, maxBatch: cfg.MaxBatch,
		bo: backoff{cfg.BackoffMin, cfg.BackoffMax}, dlq: a.produceDLQ, watermarks: true, stall: a.noteStall,
		identity: a.verifiedIdentity, identityLost: a.kickIdentity, ahead: new(atomic.Bool), raised: new(atomic.Int64),
		grew: a.refreshTopic, sources: &sourceGuard{},
	}
	if deps.Tracer != nil {
		a.proc.tracer = telemetry.Tracer(deps.Tracer, "applier")
	}
	return a, nil
}

// setup is how New and NewReplay start: cfg and d checked (d with its
// defaults), then the metrics registered.
func (d Deps) setup(cfg interface{ Validate() error }) (Deps, *metrics, error) {
	d, derr := d.checked()
	if err := errors.Join(cfg.Validate(), derr); err != nil {
		return d, nil, err
	}
	met, err := newMetrics(d.Registerer)
	if err != nil {
		return d, nil, fmt.Errorf("applier: register metrics: %w", err)
	}
	return d, met, nil
}

// Counts are the record results so far.
func (a *Applier) Counts() Counts { return a.counts.snapshot() }

// Ready reports nil while the cache tier answers and the topic exists, for
// /readyz: this process can apply. Whether the pipeline is fresh (the
// watermark) is `tidemark status`'s verdict, not a reason to take every
// applier out of service at once while capture is down; a topic that does
// not exist (capture creates it on its first start) is a setup not done, and
// the reason says which topic.
func (a *Applier) Ready(ctx context.Context) error {
	ok := a.identityOKAt.Load()
	if ok == 0 || time.Since(time.Unix(0, ok)) > max(3*a.cfg.IdentityInterval, 2*time.Second) {
		return errors.New("applier: cache tier not reachable")
	}
	switch {
	case a.topicMissing.Load():
		return fmt.Errorf("applier: topic %q does not exist yet (capture creates it on its first start)", a.cfg.Topic)
	case a.partitions.Load() == 0:
		return fmt.Errorf("applier: topic %q not read yet", a.cfg.Topic)
	}
	return nil
}

// WatermarkKnown reports nil once every partition has a watermark (what
// `tidemark-lab dev` waits for before its demo load).
func (a *Applier) WatermarkKnown(ctx context.Context) error {
	wm, err := a.cache.ReadWatermark(ctx)
	if err != nil {
		return fmt.Errorf("applier: read watermark: %w", err)
	}
	if !wm.Known {
		return errors.New("applier: watermark not known yet (a partition has no resolved marker applied)")
	}
	return nil
}

// Live reports an error when the applier's state loop (the gauges' refresh,
// which takes every partition's lock) has stopped, for /healthz. A partition
// held on a Redis error is not dead: the loop keeps going.
func (a *Applier) Live(context.Context) error { return a.liveLoop.Check(time.Now()) }

// Run consumes until ctx ends (returning nil) or a fatal error.
func (a *Applier) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	a.cancel = cancel

	// A plain client for admin requests: the preflight runs before the group
	// client exists, so that nothing is consumed until it has decided.
	conn, err := kafkaconn.Opts(a.cfg.Brokers, a.cfg.Kafka, a.log)
	if err != nil {
		return fmt.Errorf("applier: %w", err)
	}
	admCl, err := kgo.NewClient(conn...)
	if err != nil {
		return fmt.Errorf("applier: kafka client: %w", err)
	}
	defer admCl.Close()
	a.adm = kadm.NewClient(admCl)
	if err := a.preflight(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	sess := a.cfg.SessionTimeout
	cl, err := kgo.NewClient(append(conn,
		kgo.ConsumerGroup(a.cfg.Group),
		kgo.ConsumeTopics(a.cfg.Topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.SessionTimeout(sess),
		kgo.HeartbeatInterval(min(3*time.Second, sess/3)),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsAssigned(a.assigned),
		kgo.OnPartitionsRevoked(a.revoked),
		kgo.OnPartitionsLost(a.lost),
		kgo.AdjustFetchOffsetsFn(a.adjustOffsets),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group reads the whole (compacted) history
		kgo.FetchMaxWait(500*time.Millisecond),
		kgo.ProducerLinger(0),
		// Partitions an operator adds join the group's assignment within
		// this (kgo's default is 5 minutes, during which their watermark
		// would be missing).
		kgo.MetadataMinAge(min(a.cfg.TopicInterval, 5*time.Second)),
		kgo.MetadataMaxAge(a.cfg.TopicInterval),
	)...)
	if err != nil {
		return fmt.Errorf("applier: kafka client: %w", err)
	}
	// The group starts joining inside NewClient, so a rebalance callback can
	// run before this line; whichever comes first publishes the client,
	// under a.mu, before any worker starts.
	a.mu.Lock()
	if a.cl == nil {
		a.cl = cl
	}
	a.mu.Unlock()
	a.log.Info("applier starting", "topic", a.cfg.Topic, "group", a.cfg.Group, "namespace", a.ns, "session_timeout", sess)

	if err := a.ensureDLQ(ctx); err != nil {
		cl.Close()
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("applier: %w", err)
	}

	var wg sync.WaitGroup
	for _, f := range []func(context.Context){a.commitLoop, a.monitorLoop, a.metricsLoop} {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	a.pollLoop(ctx)
	cancel(nil)
	wg.Wait()
	cl.Close() // leaves the group: revoked() stops the workers and commits
	a.stopAll()
	a.log.Info("applier stopped", "counts", fmt.Sprintf("%+v", a.Counts()))
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// fail cancels the stage with its first fatal error.
func (a *Applier) fail(err error) {
	a.log.Error("fatal", "err", err)
	a.cancel(err)
}

// ensureDLQ creates <topic>.dlq if it is missing, so a dead letter never
// waits on auto-creation.
func (a *Applier) ensureDLQ(ctx context.Context) error {
	bo := backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}
	return retry(ctx, bo, a.log, "create dlq topic", func(ctx context.Context) error {
		tds, err := a.adm.ListTopics(ctx, a.cfg.dlqTopic())
		if err != nil {
			return err
		}
		if tds.Has(a.cfg.dlqTopic()) {
			return nil
		}
		_, err = a.adm.CreateTopic(ctx, 1, -1, nil, a.cfg.dlqTopic())
		if errors.Is(err, kerr.TopicAlreadyExists) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("create %s: %w", a.cfg.dlqTopic(), err)
		}
		return nil
	})
}

// produceDLQ writes a dead letter, retrying until Kafka takes it (or
// denies it: a missing ACL stops the applier): the partition's offset
// moves past the record only after that.
func (a *Applier) produceDLQ(ctx context.Context, rec *kgo.Record, cause error) error {
	dl := dlqRecord(a.cfg.dlqTopic(), rec, cause)
	err := retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "produce dead letter to "+a.cfg.dlqTopic(), func(ctx context.Context) error {
		return a.cl.ProduceSync(ctx, dl).FirstErr()
	})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("applier: %w", err)
	}
	return err
}

// pollLoop fetches and hands records to the partition workers. Rebalances
// run only between iterations (BlockRebalanceOnPoll), so the workers map
// matches the assignment while records are dispatched and offsets are set.
func (a *Applier) pollLoop(ctx context.Context) {
	var lastErrLog time.Time
	for ctx.Err() == nil {
		// A bounded poll lets a failover rewind run promptly when idle.
		pctx, pcancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fetches := a.cl.PollRecords(pctx, 10000)
		pcancel()
		if fetches.IsClientClosed() {
			return
		}
		var lost []int32
		fetches.EachError(func(topic string, p int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			var dl *kgo.ErrDataLoss
			if errors.As(err, &dl) {
				a.log.Warn("the broker lost records of a partition", "partition", p, "err", err)
				lost = append(lost, p)
				return
			}
			// Authorization does not fix itself; everything else (leader
			// moves, unknown topic while it is created) kgo retries.
			if errors.Is(err, kerr.GroupAuthorizationFailed) || errors.Is(err, kerr.TopicAuthorizationFailed) {
				a.fail(fmt.Errorf("applier: consume %s: %w", topic, err))
				return
			}
			if time.Since(lastErrLog) > 5*time.Second {
				lastErrLog = time.Now()
				a.log.Warn("fetch error (retrying)", "topic", topic, "partition", p, "err", err)
			}
		})
		var pause map[string][]int32
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if len(ftp.Records) == 0 {
				return
			}
			a.mu.Lock()
			w := a.workers[ftp.Partition]
			a.mu.Unlock()
			if w == nil {
				return // not ours any more: whoever owns it re-reads from the commit
			}
			if w.enqueue(ftp.Records, ftp.HighWatermark) {
				if pause == nil {
					pause = make(map[string][]int32)
				}
				pause[a.cfg.Topic] = append(pause[a.cfg.Topic], ftp.Partition)
			}
		})
		if pause != nil {
			a.cl.PauseFetchPartitions(pause)
		}
		if len(lost) > 0 {
			a.dataLoss(ctx, lost)
		}
		select {
		case at := <-a.rewindC:
			a.rewind(ctx, at)
		default:
		}
		a.cl.AllowRebalance()
	}
}

func (a *Applier) assigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cl == nil { // before Run got to publish it
		a.cl = cl
	}
	for _, p := range m[a.cfg.Topic] {
		if a.workers[p] != nil {
			continue
		}
		w := newWorker(a, p)
		a.workers[p] = w
		go w.run()
	}
	// A partition paused for a long queue in an earlier assignment must not
	// stay paused now.
	cl.ResumeFetchPartitions(map[string][]int32{a.cfg.Topic: m[a.cfg.Topic]})
	a.log.Info("partitions assigned", "partitions", m[a.cfg.Topic])
}

// revoked stops the workers of the revoked partitions and commits what they
// applied, before the partitions move to another applier.
func (a *Applier) revoked(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	ws := a.remove(m[a.cfg.Topic])
	for _, w := range ws {
		w.stop()
	}
	a.commitMu.Lock()
	defer a.commitMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.commit(ctx, ws); err != nil {
		a.log.Error("commit on revoke failed: the next owner re-applies from the previous commit", "err", err)
	}
	a.log.Info("partitions revoked", "partitions", m[a.cfg.Topic])
}

// lost stops the workers and commits nothing: the group has moved on and a
// commit could overwrite the new owner's progress.
func (a *Applier) lost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	for _, w := range a.remove(m[a.cfg.Topic]) {
		w.stop()
	}
	a.log.Warn("partitions lost (no commit)", "partitions", m[a.cfg.Topic])
}

func (a *Applier) remove(ps []int32) []*worker {
	a.mu.Lock()
	defer a.mu.Unlock()
	var ws []*worker
	for _, p := range ps {
		if w := a.workers[p]; w != nil {
			ws = append(ws, w)
			delete(a.workers, p)
			a.met.partitionWMAge.DeleteLabelValues(partLabel(p))
			a.met.lag.DeleteLabelValues(partLabel(p))
			a.met.stalled.DeleteLabelValues(partLabel(p))
		}
	}
	return ws
}

// stopAll stops whatever workers remain (after Close they normally are gone).
func (a *Applier) stopAll() {
	a.mu.Lock()
	ps := make([]int32, 0, len(a.workers))
	for p := range a.workers {
		ps = append(ps, p)
	}
	a.mu.Unlock()
	for _, w := range a.remove(ps) {
		w.stop()
	}
}

func (a *Applier) snapshot() []*worker {
	a.mu.Lock()
	defer a.mu.Unlock()
	ws := make([]*worker, 0, len(a.workers))
	for _, w := range a.workers {
		ws = append(ws, w)
	}
	return ws
}

// commitLoop commits applied offsets every CommitInterval.
func (a *Applier) commitLoop(ctx context.Context) {
	lifecycle.Every(ctx, a.cfg.CommitInterval, func() {
		a.commitMu.Lock()
		defer a.commitMu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := a.commit(cctx, a.snapshot()); err != nil && ctx.Err() == nil {
			a.log.Warn("commit failed (will retry)", "err", err)
		}
	})
}

// commit stores the applied offsets of ws, each with its stall note (see
// Stall) as metadata. Caller holds commitMu.
func (a *Applier) commit(ctx context.Context, ws []*worker) error {
	type pending struct {
		w  *worker
		eo kgo.EpochOffset
		md string
	}
	byP := map[int32]pending{}
	offs := map[int32]kgo.EpochOffset{}
	for _, w := range ws {
		if eo, md, ok := w.toCommit(); ok {
			byP[w.p], offs[w.p] = pending{w, eo, md}, eo
		}
	}
	if len(offs) == 0 {
		return nil
	}
	ctx = kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			if req.Topics[i].Topic != a.cfg.Topic {
				continue
			}
			for j := range req.Topics[i].Partitions {
				rp := &req.Topics[i].Partitions[j]
				if pc, ok := byP[rp.Partition]; ok {
					rp.Metadata = kmsg.StringPtr(pc.md)
				}
			}
		}
		return nil
	})
	var rerr error
	a.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{a.cfg.Topic: offs},
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			if err != nil {
				rerr = err
				return
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
						rerr = errors.Join(rerr, fmt.Errorf("partition %d: %w", p.Partition, err))
						continue
					}
					if pc, ok := byP[p.Partition]; ok {
						pc.w.markCommitted(pc.eo.Offset, pc.md)
					}
				}
			}
		})
	if rerr != nil {
		return fmt.Errorf("applier: commit offsets: %w", rerr)
	}
	return nil
}

// metricsLoop refreshes the gauges that are states rather than events.
func (a *Applier) metricsLoop(ctx context.Context) {
	lifecycle.Every(ctx, a.cfg.MetricsInterval, func() {
		a.liveLoop.Beat()
		now := time.Now()
		oldest := 0.0
		for _, w := range a.snapshot() {
			w.qmu.Lock()
			wmAge := math.Inf(1)
			if !w.resolvedAt.IsZero() {
				wmAge = now.Sub(w.resolvedAt).Seconds()
			}
			pos := w.next
			if pos < 0 {
				pos = w.firstSeen
			}
			lag := int64(0)
			if w.hw >= 0 && pos >= 0 {
				lag = max(0, w.hw-pos)
			}
			if !w.pendingSince.IsZero() {
				oldest = max(oldest, now.Sub(w.pendingSince).Seconds())
			}
			stalled := 0.0
			if w.stall != nil {
				stalled = now.Sub(w.stall.Since).Seconds()
			}
			w.qmu.Unlock()
			a.met.stalled.WithLabelValues(partLabel(w.p)).Set(stalled)
			a.met.partitionWMAge.WithLabelValues(partLabel(w.p)).Set(wmAge)
			a.met.lag.WithLabelValues(partLabel(w.p)).Set(float64(lag))
		}
		a.met.oldestPendingAge.Set(oldest)
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		wm, err := a.cache.ReadWatermark(rctx)
		cancel()
		switch {
		case err != nil:
		case wm.Known:
			a.met.watermarkAge.Set(now.Sub(wm.W).Seconds())
		default:
			a.met.watermarkAge.Set(math.Inf(1))
		}
	})
}
