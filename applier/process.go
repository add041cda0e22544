package applier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/schema"
)

// Counts are record results, as in tidemark_applier_records_total.
type Counts struct {
	Applied, Duplicate, Older, Revoked, Purged, DLQ int64
}

// Total is the number of change records counted.
func (c Counts) Total() int64 {
	return c.Applied + c.Duplicate + c.Older + c.Revoked + c.Purged + c.DLQ
}

type counters struct{ applied, duplicate, older, revoked, purged, dlq atomic.Int64 }

func (c *counters) snapshot() Counts {
	return Counts{Applied: c.applied.Load(), Duplicate: c.duplicate.Load(), Older: c.older.Load(),
		Revoked: c.revoked.Load(), Purged: c.purged.Load(), DLQ: c.dlq.Load()}
}

// deadLetter sends a bad record to the DLQ; nil drops it (replay: the live
// applier already dead-lettered it once).
type deadLetter func(ctx context.Context, rec *kgo.Record, cause error) error

// processor applies the records of one partition in order. It is shared by
// the group applier and replay, and holds no per-partition state.
type processor struct {
	cache      Cache
	met        *metrics
	counts     *counters
	log        *slog.Logger
	maxBatch   int // distinct keys gathered (and deduped) before they are applied
	callSize   int // keys per InvalidateBatch call (0: maxBatch)
	bo         backoff
	dlq        deadLetter
	watermarks bool // write partition watermarks at resolved markers
	// stall hears every failed Redis attempt of a partition (err) and the
	// recovery (nil); nil for replay.
	stall func(partition int32, what string, err error)
	// identity is the watermark identity this applier bound, passed with
	// each watermark; identityLost is told when a write was refused for it.
	identity     func() string
	identityLost func()
	// ahead is set while the cache tier refuses this applier's resolved
	// times as ahead of its clock (one log line per episode).
	ahead *atomic.Bool
	// tracer continues sampled changes' traces (tracing.go); nil: none.
	tracer trace.Tracer
	// raised is the largest partition count this applier has raised the
	// watermark's to (nil: never raise, as in replay).
	raised *atomic.Int64
	// grew is told when a marker raised the partition count: the group
	// reads the topic again now, not at its metadata max age (nil: replay).
	grew func()
	// sources holds partitions whose resolved markers come from two
	// sources (nil: replay, which writes no watermark).
	sources *sourceGuard
}

// progressFunc reports that rec and every record before it are applied;
// eventTime is rec's commit or resolved time (zero for a dead letter), and
// watermark says a partition watermark was just written for it.
type progressFunc func(rec *kgo.Record, eventTime time.Time, watermark bool)

// pendingKey is one key of the batch being built, with every record folded
// into it (dedupe keeps the highest version).
type pendingKey struct {
	inv  cache.Invalidation
	recs []pendingRec
}

type pendingRec struct {
	rec     *kgo.Record
	version int64
	commit  time.Time
}

// batch is the invalidations being gathered for one InvalidateBatch.
type batch struct {
	keys  []pendingKey
	index map[string]int
	last  *kgo.Record
	lastT time.Time
}

func (b *batch) add(rec *kgo.Record, c *schema.Change) {
	if b.index == nil {
		b.index = make(map[string]int)
	}
	k := c.Key()
	pr := pendingRec{rec: rec, version: c.Version, commit: c.CommitTime}
	if i, ok := b.index[k]; ok {
		pk := &b.keys[i]
		pk.inv.Version = max(pk.inv.Version, c.Version)
		pk.recs = append(pk.recs, pr)
	} else {
		b.index[k] = len(b.keys)
		b.keys = append(b.keys, pendingKey{inv: cache.Invalidation{Tenant: c.Tenant, Item: c.Item, Version: c.Version}, recs: []pendingRec{pr}})
	}
	b.last, b.lastT = rec, c.CommitTime
}

func (b *batch) reset() {
	b.keys = b.keys[:0]
	clear(b.index)
	b.last, b.lastT = nil, time.Time{}
}

// process applies recs in order and calls done after each applied prefix.
// It returns nil when all are applied, or ctx's cause when stopped: what was
// reported through done is in Redis, the rest is not.
func (p *processor) process(ctx context.Context, partition int32, recs []*kgo.Record, done progressFunc) error {
	var b batch
	flush := func() error {
		if b.last == nil {
			return nil
		}
		if err := p.applyBatch(ctx, partition, &b); err != nil {
			return err
		}
		done(b.last, b.lastT, false)
		b.reset()
		return nil
	}
	for _, rec := range recs {
		ev, err := schema.Decode(rec.Value)
		if err != nil {
			if err := flush(); err != nil {
				return err
			}
			if err := p.deadLetter(ctx, partition, rec, err); err != nil {
				return err
			}
			done(rec, time.Time{}, false)
			continue
		}
		if c, ok := ev.(*schema.Change); ok && (c.Op == schema.OpUpsert || c.Op == schema.OpDelete && c.Version > 0) {
			b.add(rec, c)
			if len(b.keys) >= p.maxBatch {
				if err := flush(); err != nil {
					return err
				}
			}
			continue
		}
		// Every other event acts on more than one key, or on the watermark:
		// everything before it must be in Redis first.
		if err := flush(); err != nil {
			return err
		}
		t, err := p.applyOther(ctx, partition, ev)
		if err != nil {
			return err
		}
		_, resolved := ev.(*schema.Resolved)
		done(rec, t, resolved && p.watermarks && !t.IsZero())
	}
	return flush()
}

// applyBatch applies the gathered keys, callSize per InvalidateBatch, and
// accounts each record. It returns nil once every key's invalidation, or its
// substitute, is in Redis, or ctx's cause.
func (p *processor) applyBatch(ctx context.Context, partition int32, b *batch) error {
	invs := make([]cache.Invalidation, len(b.keys))
	for i := range b.keys {
		invs[i] = b.keys[i].inv
	}
	size := p.callSize
	if size <= 0 {
		size = p.maxBatch
	}
	outs := make([]cache.InvalidateOutcome, 0, len(invs))
	start := time.Now()
	for lo := 0; lo < len(invs); lo += size {
		chunk := invs[lo:min(lo+size, len(invs))]
		got, err := p.invalidate(ctx, partition, chunk)
		if err != nil {
			return err
		}
		p.met.batchSize.Observe(float64(len(chunk)))
		outs = append(outs, got...)
	}
	now := time.Now()
	for i, o := range outs {
		pk := &b.keys[i]
		result := string(o.Result)
		if o.Err != nil {
			var err error
			if result, err = p.substitute(ctx, partition, pk.inv, o.Err); err != nil {
				return err
			}
		}
		p.traceApplied(partition, pk, result, len(invs), start, now)
		kept := false
		for _, pr := range pk.recs {
			p.met.commitToApply.Observe(now.Sub(pr.commit).Seconds())
			switch {
			case pr.version == pk.inv.Version && !kept:
				kept = true
				p.count(result)
			case pr.version == pk.inv.Version:
				p.count(resultDuplicate) // the same version twice in one batch
			default:
				p.count(resultOlder) // superseded by a higher version in the batch
			}
		}
	}
	return nil
}

// invalidate runs one InvalidateBatch call until no outcome is a server
// error (LOADING, READONLY, OOM, NOREPLICAS...: the server, not the key, is
// the problem, so the whole call is retried; it is idempotent). Outcomes
// left with an error are about their key's data (classKey).
func (p *processor) invalidate(ctx context.Context, partition int32, chunk []cache.Invalidation) ([]cache.InvalidateOutcome, error) {
	var got []cache.InvalidateOutcome
	err := p.retry(ctx, partition, "invalidate batch", func(ctx context.Context) error {
		var err error
		got, err = p.cache.InvalidateBatch(ctx, chunk)
		if err == nil && len(got) != len(chunk) {
			err = fmt.Errorf("applier: invalidate batch: %d outcomes for %d keys", len(got), len(chunk))
		}
		for i := 0; err == nil && i < len(got); i++ {
			if o := got[i].Err; o != nil && classify(o) == classRetry {
				err = o
			}
		}
		return err
	})
	return got, err
}

// substitute handles a key whose stored value cannot take an invalidation
// (classKey): the key is purged, so the next reader misses and reads the
// source, then the invalidation runs again on the empty key to set its
// floor. If the key refuses even that, the purge stands in for it.
func (p *processor) substitute(ctx context.Context, partition int32, inv cache.Invalidation, cause error) (string, error) {
	key := schema.Key(inv.Tenant, inv.Item)
	p.log.Warn("key cannot take its invalidation: purging it", "partition", partition, "key", strconv.Quote(key), "err", cause)
	if err := p.retry(ctx, partition, "purge key", func(ctx context.Context) error { return p.cache.Purge(ctx, inv.Tenant, inv.Item) }); err != nil {
		return "", err
	}
	got, err := p.invalidate(ctx, partition, []cache.Invalidation{inv})
	if err != nil {
		return "", err
	}
	if got[0].Err != nil {
		p.log.Warn("key purged in place of its invalidation", "partition", partition, "key", strconv.Quote(key), "err", got[0].Err)
		return resultPurged, nil
	}
	return string(got[0].Result), nil
}

// retry is retryNotify with the processor's backoff, reporting each failed
// attempt and the recovery through stall (when set).
func (p *processor) retry(ctx context.Context, partition int32, what string, fn func(context.Context) error) error {
	var hook retryHook
	if p.stall != nil {
		hook = func(what string, err error) { p.stall(partition, what, err) }
	}
	return retryNotify(ctx, p.bo, p.log, what, hook, fn)
}

// applyOther applies a record that is not a plain invalidation and returns its
// event time.
func (p *processor) applyOther(ctx context.Context, partition int32, ev schema.Event) (time.Time, error) {
	var (
		what    string
		t       time.Time
		fn      func(context.Context) error
		refused bool
	)
	switch e := ev.(type) {
	case *schema.Change:
		t = e.CommitTime
		switch e.Op {
		case schema.OpDelete: // version 0: hard delete of unknown version
			what = "purge"
			fn = func(ctx context.Context) error { return p.cache.Purge(ctx, e.Tenant, e.Item) }
		case schema.OpTruncate:
			// The commit timestamp is taken before the commit is visible,
			// and readers' clocks may be ahead: MarkGap adds the margin.
			what = "set reset_at (truncate)"
			fn = func(ctx context.Context) error { _, err := p.cache.MarkGap(ctx, e.CommitTime); return err }
		}
	case *schema.Resolved:
		t = e.ResolvedTime
		if !p.watermarks {
			return t, nil
		}
		if p.sources != nil {
			if other := p.sources.conflict(partition, e.Source, time.Now()); other != "" {
				p.refusedSource(partition, e.Source, other)
				return time.Time{}, nil // no watermark was written
			}
		}
		what = "set watermark"
		fn = func(ctx context.Context) error {
			id := ""
			if p.identity != nil {
				id = p.identity()
			}
			// The marker went to this many partitions: they are all part of
			// W before this one vouches for anything (a partition the topic
			// grew may already hold records no marker has covered).
			if n := int64(e.Partitions); n > 0 && p.raised != nil && n > p.raised.Load() {
				if err := p.cache.SetPartitions(ctx, int(n)); err != nil {
					return err
				}
				for cur := p.raised.Load(); n > cur && !p.raised.CompareAndSwap(cur, n); cur = p.raised.Load() {
				}
				if p.grew != nil {
					p.grew()
				}
			}
			err := p.cache.SetWatermarkFrom(ctx, partition, e.ResolvedTime, id, e.Source)
			if errors.Is(err, cache.ErrWatermarkAhead) {
				// Refused, and counted in the hash: a resolved time from the
				// future vouches for nothing. The partition moves on; its
				// watermark waits for a marker the cache tier's clock allows.
				refused = true
				p.refusedAhead(partition, err)
				return nil
			}
			if errors.Is(err, cache.ErrWatermarkIdentity) {
				// The hash lost the identity this applier bound (a flush,
				// an eviction, another applier's reset): nothing was
				// written. The watermark holds until the applier has set
				// reset_at and bound the hash again (failover.go).
				refused = true
				if p.identityLost != nil {
					p.identityLost()
				}
				return nil
			}
			return err
		}
	case *schema.Reset:
		t = e.ResetTime
		what = "set reset_at"
		fn = func(ctx context.Context) error { _, err := p.cache.MarkGap(ctx, e.ResetTime); return err }
	}
	if fn == nil {
		return t, nil
	}
	// Every failure is retried: a reset or TRUNCATE that cannot be written
	// holds the partition rather than be dropped.
	if err := p.retry(ctx, partition, what, fn); err != nil {
		return t, err
	}
	if refused {
		return time.Time{}, nil // no watermark was written
	}
	if _, ok := ev.(*schema.Resolved); ok && p.ahead != nil && p.ahead.CompareAndSwap(true, false) {
		p.log.Info("resolved times are within the cache tier's clock again; watermarks move", "partition", partition)
	}
	if c, ok := ev.(*schema.Change); ok {
		p.met.commitToApply.Observe(time.Since(c.CommitTime).Seconds())
		p.count(resultApplied)
	}
	return t, nil
}

// refusedAhead counts a resolved time the cache tier refused as ahead of its
// clock and logs the first of an episode.
func (p *processor) refusedAhead(partition int32, err error) {
	p.met.aheadRefused.Inc()
	if p.ahead == nil || p.ahead.CompareAndSwap(false, true) {
		p.log.Error("resolved time refused: ahead of the cache tier's clock (a Postgres clock stepped ahead, or a heartbeat message capture did not write); the watermark holds",
			"partition", partition, "err", err)
	}
}

// refusedSource counts a resolved marker refused because another source's
// reached the partition within sourceWindow, and says so at most once a
// minute.
func (p *processor) refusedSource(partition int32, source, other string) {
	p.met.sourceConflicts.Inc()
	if p.sources.warnDue(time.Now()) {
		p.log.Error("resolved markers of two sources on one partition: two deployments' captures feed this topic, each vouching for the other's cache; the watermark holds until one stops (give each deployment its own --topic and --slot)",
			"partition", partition, "source", source, "other_source", other)
	}
}

// deadLetter handles a record no Redis state could ever accept (undecodable,
// unknown schema version): it purges the record's key when the key is
// readable (when unsure, drop the cached value rather than keep a possibly
// stale one), then hands the record to the DLQ and counts it.
//
// A record whose key is not an item key (a marker: reset, truncate or
// resolved, from a newer capture during a rolling upgrade or corrupted)
// may have been a reset: reset_at moves to the cache tier's clock plus the
// reset margin first, which covers any reset time it could have carried
// (no later than now), so no entry observed before the lost reset is
// extended by the watermark.
func (p *processor) deadLetter(ctx context.Context, partition int32, rec *kgo.Record, cause error) error {
	if tenant, item, err := schema.ParseKey(string(rec.Key)); err == nil {
		err := p.retry(ctx, partition, "purge dead-lettered key", func(ctx context.Context) error { return p.cache.Purge(ctx, tenant, item) })
		if err != nil {
			return err
		}
	} else {
		err := p.retry(ctx, partition, "set reset_at for a dead-lettered marker", func(ctx context.Context) error {
			_, err := p.cache.MarkGapNow(ctx)
			return err
		})
		if err != nil {
			return err
		}
	}
	if p.dlq != nil {
		if err := p.dlq(ctx, rec, cause); err != nil {
			return err
		}
	}
	p.log.Warn("record dead-lettered", "partition", partition, "offset", rec.Offset, "key", strconv.Quote(string(rec.Key)), "err", cause)
	p.count(resultDLQ)
	return nil
}

func (p *processor) count(result string) {
	p.met.records.WithLabelValues(result).Inc()
	switch result {
	case resultApplied:
		p.counts.applied.Add(1)
	case resultDuplicate:
		p.counts.duplicate.Add(1)
	case resultOlder:
		p.counts.older.Add(1)
	case resultRevoked:
		p.counts.revoked.Add(1)
	case resultPurged:
		p.counts.purged.Add(1)
	case resultDLQ:
		p.counts.dlq.Add(1)
	}
}

// dlqHeaders are the headers added to a dead letter.
const (
	HeaderError           = "tidemark-error"
	HeaderSourceTopic     = "tidemark-source-topic"
	HeaderSourcePartition = "tidemark-source-partition"
	HeaderSourceOffset    = "tidemark-source-offset"
)

// dlqRecord builds the dead letter of rec: the original key, value and
// headers plus the error and where it came from.
func dlqRecord(topic string, rec *kgo.Record, cause error) *kgo.Record {
	h := append([]kgo.RecordHeader(nil), rec.Headers...)
	h = append(h,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(cause.Error())},
		kgo.RecordHeader{Key: HeaderSourceTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderSourcePartition, Value: []byte(strconv.FormatInt(int64(rec.Partition), 10))},
		kgo.RecordHeader{Key: HeaderSourceOffset, Value: []byte(strconv.FormatInt(rec.Offset, 10))},
	)
	return &kgo.Record{Topic: topic, Key: rec.Key, Value: rec.Value, Headers: h, Timestamp: rec.Timestamp}
}
