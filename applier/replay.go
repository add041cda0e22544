package applier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/internal/kafkaconn"
)

// ReplayConfig configures a replay (tidemark replay).
type ReplayConfig struct {
	Brokers    []string
	Kafka      kafkaconn.Config // TLS and SASL
	Topic      string
	Since      time.Time // re-apply records produced at or after this time
	Partitions []int32   // empty means all
	MaxBatch   int       // keys per InvalidateBatch call
	// Window is how many records a partition worker gathers before applying:
	// replay dedupes by key over the whole window (only the newest version
	// of a key matters, and order between keys does not), which saves most
	// Redis calls on an uncompacted topic.
	Window     int
	BackoffMin time.Duration
	BackoffMax time.Duration
}

// DefaultReplayConfig is what `tidemark replay` runs with (brokers and
// since aside).
func DefaultReplayConfig() ReplayConfig {
	d := DefaultConfig()
	return ReplayConfig{Topic: d.Topic, MaxBatch: d.MaxBatch, Window: 50_000, BackoffMin: d.BackoffMin, BackoffMax: d.BackoffMax}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c ReplayConfig) Validate() error {
	var p config.Problems
	if len(c.Brokers) == 0 {
		p.Add("Brokers", "is required (host:port list)")
	}
	p.Nested("Kafka", c.Kafka.Validate())
	if c.Topic == "" {
		p.Add("Topic", "must not be empty")
	}
	if c.Since.IsZero() {
		p.Add("Since", "is required (a duration such as 10m, or an RFC 3339 time)")
	} else if c.Since.After(time.Now().Add(time.Minute)) {
		p.Add("Since", "%s is in the future", c.Since.Format(time.RFC3339))
	}
	for _, n := range c.Partitions {
		if n < 0 {
			p.Add("Partitions", "%d is not a partition number", n)
		}
	}
	if c.MaxBatch < 1 {
		p.Add("MaxBatch", "must be at least 1 (got %d)", c.MaxBatch)
	}
	if c.Window < c.MaxBatch {
		p.Add("Window", "must be at least the batch size %d (got %d)", c.MaxBatch, c.Window)
	}
	p.Positive("BackoffMin", c.BackoffMin)
	if c.BackoffMax < c.BackoffMin {
		p.Add("BackoffMax", "must be at least the minimum backoff %s (got %s)", c.BackoffMin, c.BackoffMax)
	}
	return p.Err()
}

// ReplaySummary is what a replay did.
type ReplaySummary struct {
	Counts
	Records    int64              // records read (changes, markers and bad ones)
	Partitions map[int32][2]int64 // partition -> [start, end) offsets replayed
	Elapsed    time.Duration
	// Gaps are the partitions whose records from Since on may have been
	// deleted by the topic's retention before the replay could read them.
	Gaps map[int32]RetentionGap
	// ResetAt is the reset_at the replay set because of Gaps (zero if none):
	// no cached entry observed before it is extended by the watermark.
	ResetAt time.Time
}

// RetentionGap says what retention deleted from a partition: every record
// before LogStart, and the oldest one kept is from FirstKept (the replay's
// start; zero when nothing is kept).
type RetentionGap struct {
	LogStart  int64
	FirstKept time.Time
}

// Replay re-applies a range of the topic outside the consumer group. It is
// idempotent (invalidations only raise floors) and does not write partition
// watermarks: records before the range were not re-applied, so the live
// applier's watermarks stay the only promise.
type Replay struct {
	cfg   ReplayConfig
	cache Cache
	log   *slog.Logger
	met   *metrics

	counts counters
	done   atomic.Int64
	total  atomic.Int64
}

// NewReplay checks cfg and deps and registers the metrics.
func NewReplay(cfg ReplayConfig, deps Deps) (*Replay, error) {
	deps, met, err := deps.setup(cfg)
	if err != nil {
		return nil, err
	}
	return &Replay{cfg: cfg, cache: deps.Cache, log: deps.Log.With("component", "replay"), met: met}, nil
}

// Progress reports records handled so far and the total to handle (known
// once Run has listed the offsets).
func (r *Replay) Progress() (done, total int64) { return r.done.Load(), r.total.Load() }

// Run replays from the offsets at Since to the end offsets seen at start.
func (r *Replay) Run(ctx context.Context) (ReplaySummary, error) {
	start := time.Now()
	opts, err := kafkaconn.Opts(r.cfg.Brokers, r.cfg.Kafka, r.log)
	if err != nil {
		return ReplaySummary{}, fmt.Errorf("applier: replay: %w", err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.FetchMaxWait(200*time.Millisecond), kgo.FetchMaxPartitionBytes(16<<20), kgo.FetchMaxBytes(64<<20))...)
	if err != nil {
		return ReplaySummary{}, fmt.Errorf("applier: replay: kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ranges, gaps, err := r.plan(ctx, adm)
	if err != nil {
		return ReplaySummary{}, err
	}
	sum := ReplaySummary{Partitions: ranges, Gaps: gaps}
	if len(gaps) > 0 {
		if sum.ResetAt, err = r.resetForGaps(ctx, gaps); err != nil {
			return sum, err
		}
	}
	offsets := map[int32]kgo.Offset{}
	var total int64
	for p, rg := range ranges {
		if rg[1] > rg[0] {
			offsets[p] = kgo.NewOffset().At(rg[0])
			total += rg[1] - rg[0]
		}
	}
	r.total.Store(total)
	r.log.Info("replay starting", "topic", r.cfg.Topic, "since", r.cfg.Since.UTC().Format(time.RFC3339Nano), "records", total, "partitions", len(offsets))
	if len(offsets) > 0 {
		if err := r.consume(ctx, cl, offsets, ranges); err != nil {
			return sum, err
		}
	}
	sum.Counts = r.counts.snapshot()
	sum.Records = r.done.Load()
	sum.Elapsed = time.Since(start)
	return sum, nil
}

// resetForGaps tells what retention deleted and raises reset_at to the
// newest first-kept time: an entry observed before it may have missed an
// invalidation that no longer exists anywhere, so it must not be trusted
// past its hard lifetime.
func (r *Replay) resetForGaps(ctx context.Context, gaps map[int32]RetentionGap) (time.Time, error) {
	at := time.Time{}
	for p, g := range gaps {
		first := g.FirstKept
		if first.IsZero() {
			first = time.Now() // nothing kept: any entry may be stale
		}
		if first.After(at) {
			at = first
		}
		r.log.Warn("replay: records from --since on were deleted by the topic's retention and cannot be re-applied",
			"partition", p, "log_start_offset", g.LogStart, "first_kept", g.FirstKept.UTC().Format(time.RFC3339Nano))
	}
	// The cache tier adds the reset margin (promise.ResetMargin) and keeps
	// reset_at from going back: the summary reports what it stored.
	at, err := r.cache.MarkGap(ctx, at)
	if err != nil {
		return time.Time{}, fmt.Errorf("applier: replay: set reset_at for the retention gap: %w", err)
	}
	r.log.Warn("replay: reset_at raised over the retention gap: cached entries observed before it are no longer extended by the watermark and expire at their hard lifetime",
		"reset_at", at.UTC().Format(time.RFC3339Nano), "partitions", len(gaps))
	return at, nil
}

// plan lists [start, end) per partition, and the partitions where retention
// deleted records that may be from Since or later: the log no longer starts
// at offset 0 and the replay would start at its first kept record, which is
// newer than Since.
func (r *Replay) plan(ctx context.Context, adm *kadm.Client) (map[int32][2]int64, map[int32]RetentionGap, error) {
	starts, err := adm.ListOffsetsAfterMilli(ctx, r.cfg.Since.UnixMilli(), r.cfg.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("applier: replay: list offsets at Since: %w", err)
	}
	logStarts, err := adm.ListStartOffsets(ctx, r.cfg.Topic)
	if err == nil {
		err = logStarts.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("applier: replay: list log start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, r.cfg.Topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("applier: replay: list end offsets: %w", err)
	}
	if _, ok := ends[r.cfg.Topic]; !ok {
		return nil, nil, fmt.Errorf("applier: replay: topic %q does not exist", r.cfg.Topic)
	}
	gaps := map[int32]RetentionGap{}
	out := map[int32][2]int64{}
	var missing []int32
	want := func(p int32) bool { return len(r.cfg.Partitions) == 0 || slices.Contains(r.cfg.Partitions, p) }
	for p, e := range ends[r.cfg.Topic] {
		if !want(p) {
			continue
		}
		s, ok := starts.Lookup(r.cfg.Topic, p)
		found := ok && s.Offset >= 0
		if !found {
			s.Offset = e.Offset
		}
		out[p] = [2]int64{min(s.Offset, e.Offset), e.Offset}
		if ls, ok := logStarts.Lookup(r.cfg.Topic, p); ok && ls.Offset > 0 {
			switch {
			case found && s.Offset <= ls.Offset && s.Timestamp > r.cfg.Since.UnixMilli():
				gaps[p] = RetentionGap{LogStart: ls.Offset, FirstKept: time.UnixMilli(s.Timestamp)}
			case !found && ls.Offset >= e.Offset: // everything deleted: its times are unknown
				gaps[p] = RetentionGap{LogStart: ls.Offset}
			}
		}
	}
	for _, p := range r.cfg.Partitions {
		if _, ok := out[p]; !ok {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("applier: replay: partitions %v do not exist in %s", missing, r.cfg.Topic)
	}
	return out, gaps, nil
}

func (r *Replay) consume(ctx context.Context, cl *kgo.Client, offsets map[int32]kgo.Offset, ranges map[int32][2]int64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.cfg.Topic: offsets})
	proc := processor{cache: r.cache, met: r.met, counts: &r.counts, log: r.log, maxBatch: r.cfg.Window, callSize: r.cfg.MaxBatch,
		bo: backoff{r.cfg.BackoffMin, r.cfg.BackoffMax}}
	// Each partition has its own worker; a worker that falls behind gets its
	// partition paused instead of blocking the poll loop (which would
	// starve every other partition).
	const queueCap = 16
	chans := map[int32]chan []*kgo.Record{}
	paused := map[int32]bool{}
	var wg sync.WaitGroup
	for p := range offsets {
		ch := make(chan []*kgo.Record, queueCap)
		chans[p] = ch
		end := ranges[p][1]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for recs := range ch {
				// Take whatever else is queued, up to the window.
			gather:
				for len(recs) < r.cfg.Window {
					select {
					case more, ok := <-ch:
						if !ok {
							break gather
						}
						recs = append(recs[:len(recs):len(recs)], more...)
					default:
						break gather
					}
				}
				err := proc.process(ctx, p, recs, func(*kgo.Record, time.Time, bool) {})
				if err != nil {
					cancel(err)
					return
				}
				r.done.Add(int64(len(recs)))
				if recs[len(recs)-1].Offset+1 >= end {
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	remaining := len(offsets)
	doneP := map[int32]bool{}
	for remaining > 0 && ctx.Err() == nil {
		for p := range paused {
			if len(chans[p]) < queueCap/4 {
				delete(paused, p)
				cl.ResumeFetchPartitions(map[string][]int32{r.cfg.Topic: {p}})
			}
		}
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		fetches := cl.PollRecords(pctx, 10000)
		pcancel()
		if ctx.Err() != nil {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				r.log.Warn("fetch error (retrying)", "partition", p, "err", err)
			}
		})
		fetches.EachPartition(func(ftp kgo.FetchTopicPartition) {
			if doneP[ftp.Partition] || len(ftp.Records) == 0 {
				return
			}
			end := ranges[ftp.Partition][1]
			recs := ftp.Records
			if i := slices.IndexFunc(recs, func(rec *kgo.Record) bool { return rec.Offset >= end }); i >= 0 {
				recs = recs[:i]
			}
			ch := chans[ftp.Partition]
			if len(recs) > 0 {
				select {
				case ch <- recs:
				case <-ctx.Done():
					return
				}
			}
			if len(recs) < len(ftp.Records) || recs[len(recs)-1].Offset+1 >= end {
				doneP[ftp.Partition] = true
				delete(paused, ftp.Partition)
				close(ch)
				cl.PauseFetchPartitions(map[string][]int32{r.cfg.Topic: {ftp.Partition}})
				remaining--
			} else if len(ch) >= queueCap/2 && !paused[ftp.Partition] {
				paused[ftp.Partition] = true
				cl.PauseFetchPartitions(map[string][]int32{r.cfg.Topic: {ftp.Partition}})
			}
		})
	}
	if ctx.Err() != nil {
		for p, ch := range chans {
			if !doneP[p] {
				close(ch)
			}
		}
		wg.Wait()
		return fmt.Errorf("applier: replay: %w", context.Cause(ctx))
	}
	<-finished
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("applier: replay: %w", err)
	}
	return nil
}
