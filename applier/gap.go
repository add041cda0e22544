package applier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Gap reasons: the label of tidemark_applier_gaps_total.
const (
	gapOffsetBeyondEnd = "offset_beyond_end" // the committed offset is past the partition's end
	gapDataLoss        = "data_loss"         // the client saw the log shrink under it
)

// adjustOffsets runs when partitions are assigned, after their committed
// offsets are fetched and before anything is consumed. It rewinds them when
//   - preflight found a restart or failover that happened while no applier
//     ran (the first assignment only), or
//   - a partition's end offset is below its committed offset: the broker
//     lost records (an unclean leader election, a recreated topic) and
//     invalidations the applier never saw may be among them, so it is a gap:
//     reset_at = now, then the rewind re-applies what is left.
//
// The rewind target is the first record produced in the hard lifetime before
// the event, but never later than the committed offset.
func (a *Applier) adjustOffsets(ctx context.Context, offs map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	ps := offs[a.cfg.Topic]
	if len(ps) == 0 {
		return offs, nil
	}
	// The group may have been joined by an applier of another namespace
	// since this one started (group.go): nothing is consumed from its
	// offsets.
	assigned := make([]int32, 0, len(ps))
	for p := range ps {
		assigned = append(assigned, p)
	}
	if err := a.checkGroupNamespace(ctx, assigned); err != nil {
		if errors.Is(err, ErrForeignGroup) {
			a.fail(err)
		}
		return nil, err
	}
	a.mu.Lock()
	at := a.startRewind
	a.startRewind = time.Time{}
	a.mu.Unlock()
	rewindAll := !at.IsZero()

	bo := backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}
	var ends kadm.ListedOffsets
	err := retry(ctx, bo, a.log, "list end offsets", func(ctx context.Context) error {
		var err error
		ends, err = a.adm.ListEndOffsets(ctx, a.cfg.Topic)
		if err == nil {
			err = ends.Error()
		}
		return err
	})
	if err != nil {
		return nil, err // the session is ending
	}
	var lost []int32
	for p, o := range ps {
		eo := o.EpochOffset()
		if end, ok := ends.Lookup(a.cfg.Topic, p); ok && eo.Offset >= 0 && end.Offset < eo.Offset {
			lost = append(lost, p)
			a.log.Warn("partition's end offset is below its committed offset: the broker lost records; treating it as a gap",
				"partition", p, "committed", eo.Offset, "end", end.Offset)
		}
	}
	if len(lost) > 0 {
		now := time.Now()
		if err := a.gap(ctx, gapOffsetBeyondEnd, len(lost), now); err != nil {
			return nil, err
		}
		if at.IsZero() {
			at = now
		}
	}
	if at.IsZero() {
		return offs, nil
	}
	var listed kadm.ListedOffsets
	err = retry(ctx, bo, a.log, "list offsets for rewind", func(ctx context.Context) error {
		var err error
		listed, err = a.adm.ListOffsetsAfterMilli(ctx, at.Add(-rewindSpan).UnixMilli(), a.cfg.Topic)
		if err == nil {
			err = listed.Error()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	set := map[int32]int64{}
	for p, o := range ps {
		if !rewindAll && !slices.Contains(lost, p) {
			continue
		}
		l, ok := listed.Lookup(a.cfg.Topic, p)
		committed := o.EpochOffset().Offset
		if !ok || l.Offset < 0 || committed < 0 || (l.Offset >= committed && !slices.Contains(lost, p)) {
			continue // no commit: it starts at the log start anyway
		}
		ps[p] = kgo.NewOffset().At(l.Offset).WithEpoch(-1)
		set[p] = l.Offset
	}
	a.log.Warn("partitions rewound before consuming", "since", at.Add(-rewindSpan).UTC().Format(time.RFC3339Nano), "offsets", fmt.Sprint(set))
	return offs, nil
}

// dataLoss handles partitions whose log the client saw shrink while it
// consumed (kgo.ErrDataLoss; the client has already moved their position):
// the same gap as a committed offset beyond the end, and a rewind. It runs
// in the poll loop.
func (a *Applier) dataLoss(ctx context.Context, ps []int32) {
	at := time.Now()
	if err := a.gap(ctx, gapDataLoss, len(ps), at); err != nil {
		return // stopping
	}
	a.rewind(ctx, at)
}

// gap sets reset_at to the cache tier's clock plus promise.ResetMargin
// (cached entries observed before it are no longer extended by the
// watermark; Redis's clock, not this host's, so a fast or slow applier
// cannot place it), retrying until Redis takes it, and counts it. at is
// this process's time of the event, used only to place the rewind.
func (a *Applier) gap(ctx context.Context, reason string, partitions int, at time.Time) error {
	var resetAt time.Time
	err := retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "set reset_at after a gap",
		func(ctx context.Context) error { var err error; resetAt, err = a.cache.MarkGapNow(ctx); return err })
	if err != nil {
		return err
	}
	a.met.gaps.WithLabelValues(reason).Add(float64(partitions))
	a.log.Warn("gap in the topic: reset_at set; cached entries observed before it will not be extended", "reason", reason, "partitions", partitions,
		"reset_at", resetAt.UTC(), "noticed_at", at.UTC())
	return nil
}
