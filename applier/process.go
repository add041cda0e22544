package applier

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"tidemark/cache"
	"tidemark/schema"
)

// Counts are record results, as in tidemark_applier_records_total.
type Counts struct {
	Applied, Duplicate, Older, DLQ int64
}

// Total is the number of change records counted.
func (c Counts) Total() int64 { return c.Applied + c.Duplicate + c.Older + c.DLQ }

type counters struct{ applied, duplicate, older, dlq atomic.Int64 }

func (c *counters) snapshot() Counts {
	return Counts{Applied: c.applied.Load(), Duplicate: c.duplicate.Load(), Older: c.older.Load(), DLQ: c.dlq.Load()}
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
		t, err := p.applyOther(ctx, partition, rec, ev)
		if err != nil {
			return err
		}
		_, resolved := ev.(*schema.Resolved)
		done(rec, t, resolved && p.watermarks && !t.IsZero())
	}
	return flush()
}

// applyBatch applies the gathered keys, callSize per InvalidateBatch, and
// accounts each record.
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
	for lo := 0; lo < len(invs); lo += size {
		chunk := invs[lo:min(lo+size, len(invs))]
		var got []cache.InvalidateOutcome
		err := retry(ctx, p.bo, p.log, "invalidate batch", func(ctx context.Context) error {
			var err error
			got, err = p.cache.InvalidateBatch(ctx, chunk)
			if err == nil && len(got) != len(chunk) {
				err = fmt.Errorf("applier: invalidate batch: %d outcomes for %d keys", len(got), len(chunk))
			}
			for i := 0; err == nil && i < len(got); i++ {
				if o := got[i].Err; o != nil && !isPermanent(o) {
					// LOADING, READONLY, CLUSTERDOWN...: the server, not the
					// key, is the problem; the whole call is retried.
					err = o
				}
			}
			return err
		})
		if err != nil {
			// A connection-level error is retried above, so this is a
			// cancel or an error about the whole batch retrying cannot fix.
			if ctx.Err() != nil {
				return err
			}
			return fmt.Errorf("applier: invalidate batch: %w", err)
		}
		p.met.batchSize.Observe(float64(len(chunk)))
		outs = append(outs, got...)
	}
	now := time.Now()
	for i, o := range outs {
		pk := &b.keys[i]
		if o.Err != nil {
			// The key itself is bad (e.g. WRONGTYPE): drop it and dead-letter
			// every record folded into it.
			for _, pr := range pk.recs {
				if err := p.deadLetter(ctx, partition, pr.rec, fmt.Errorf("invalidate %s: %w", schema.Key(pk.inv.Tenant, pk.inv.Item), o.Err)); err != nil {
					return err
				}
			}
			continue
		}
		kept := false
		for _, pr := range pk.recs {
			p.met.commitToApply.Observe(now.Sub(pr.commit).Seconds())
			switch {
			case pr.version == pk.inv.Version && !kept:
				kept = true
				p.count(string(o.Result))
			case pr.version == pk.inv.Version:
				p.count(resultDuplicate) // the same version twice in one batch
			default:
				p.count(resultOlder) // superseded by a higher version in the batch
			}
		}
	}
	return nil
}

// applyOther applies a record that is not a plain invalidation and returns its
// event time.
func (p *processor) applyOther(ctx context.Context, partition int32, rec *kgo.Record, ev schema.Event) (time.Time, error) {
	var (
		what string
		t    time.Time
		fn   func(context.Context) error
	)
	switch e := ev.(type) {
	case *schema.Change:
		t = e.CommitTime
		switch e.Op {
		case schema.OpDelete: // version 0: hard delete of unknown version
			what = "purge"
			fn = func(ctx context.Context) error { return p.cache.Purge(ctx, e.Tenant, e.Item) }
		case schema.OpTruncate:
			what = "set reset_at (truncate)"
			fn = func(ctx context.Context) error { return p.cache.SetResetAt(ctx, e.CommitTime) }
		}
	case *schema.Resolved:
		t = e.ResolvedTime
		if !p.watermarks {
			return t, nil
		}
		what = "set watermark"
		fn = func(ctx context.Context) error { return p.cache.SetWatermark(ctx, partition, e.ResolvedTime) }
	case *schema.Reset:
		t = e.ResetTime
		what = "set reset_at"
		fn = func(ctx context.Context) error { return p.cache.SetResetAt(ctx, e.ResetTime) }
	}
	if fn == nil {
		return t, nil
	}
	err := retry(ctx, p.bo, p.log, what, fn)
	switch {
	case err == nil:
		if c, ok := ev.(*schema.Change); ok {
			p.met.commitToApply.Observe(time.Since(c.CommitTime).Seconds())
			p.count(resultApplied)
		}
		return t, nil
	case ctx.Err() != nil:
		return t, err
	case isPermanent(err):
		return time.Time{}, p.deadLetter(ctx, partition, rec, fmt.Errorf("%s: %w", what, err))
	}
	return t, fmt.Errorf("applier: %s: %w", what, err)
}

// deadLetter purges the record's key when it is readable (when unsure, drop
// the cached value rather than keep a possibly stale one), then hands the
// record to the DLQ and counts it.
func (p *processor) deadLetter(ctx context.Context, partition int32, rec *kgo.Record, cause error) error {
	if tenant, item, err := schema.ParseKey(string(rec.Key)); err == nil {
		err := retry(ctx, p.bo, p.log, "purge bad key", func(ctx context.Context) error { return p.cache.Purge(ctx, tenant, item) })
		if err != nil && ctx.Err() != nil {
			return err
		}
		if err != nil {
			p.log.Error("purge of a dead-lettered key failed", "key", string(rec.Key), "err", err)
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
