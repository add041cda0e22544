package applier

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// monitorLoop watches the cache tier's identity (a restart or failover loses
// recently applied floors) and keeps the watermark hash's partition count
// equal to the topic's.
func (a *Applier) monitorLoop(ctx context.Context) {
	idT := time.NewTicker(a.cfg.IdentityInterval)
	defer idT.Stop()
	topicT := time.NewTicker(a.cfg.TopicInterval)
	defer topicT.Stop()
	a.checkIdentity(ctx)
	a.syncPartitions(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-idT.C:
			if a.checkIdentity(ctx) {
				a.syncPartitions(ctx) // the hash may be gone
			}
		case <-topicT.C:
			a.syncPartitions(ctx)
		}
	}
}

// checkIdentity reports whether the cache tier changed under us. On a
// change it sets reset_at = now (entries observed before it may no longer
// be extended by the watermark) and asks the poll loop to rewind.
func (a *Applier) checkIdentity(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	id, err := a.cache.ServerIdentity(rctx)
	cancel()
	if err != nil {
		return false // unreachable: the workers retry; we look again next tick
	}
	a.identityOKAt.Store(time.Now().UnixNano())
	if a.identity == "" || a.identity == id {
		a.identity = id
		return false
	}
	at := time.Now()
	a.log.Warn("cache tier restarted or failed over: setting reset_at and rewinding partitions",
		"old_identity", a.identity, "new_identity", id, "rewind_span", a.cfg.HardLifetime.String()+" + lag")
	a.identity = id
	a.met.failoverRewinds.Inc()
	err = retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "set reset_at after failover",
		func(ctx context.Context) error { return a.cache.SetResetAt(ctx, at) })
	if err != nil && ctx.Err() == nil {
		a.log.Error("set reset_at after failover failed", "err", err)
	}
	select {
	case a.rewindC <- at:
	default: // a rewind is already pending; the earlier time covers more
	}
	return true
}

// syncPartitions writes the topic's partition count to the watermark hash.
func (a *Applier) syncPartitions(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tds, err := a.adm.ListTopics(rctx, a.cfg.Topic)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			a.log.Warn("cannot read the topic's partition count", "topic", a.cfg.Topic, "err", err)
		}
		return
	case !tds.Has(a.cfg.Topic):
		// Normal until capture has created it; retried every TopicInterval.
		a.log.Info("topic does not exist yet", "topic", a.cfg.Topic)
		return
	}
	// Written every time (one HSET per interval), so a hash lost to a flush
	// nobody noticed is repaired within TopicInterval.
	n := len(tds[a.cfg.Topic].Partitions)
	if old := a.partitions.Swap(int64(n)); old != int64(n) && old != 0 {
		a.log.Info("topic partition count changed", "from", old, "to", n)
	}
	if err := a.cache.SetPartitions(rctx, n); err != nil {
		if ctx.Err() == nil {
			a.log.Warn("set partitions failed", "err", err)
		}
	}
}

// rewind moves every owned partition back to the offset at
// now - (hard lifetime + lag), where lag is how far behind the partition's
// applied event time is: that re-applies every invalidation a cached value
// still alive might depend on. It runs in the poll loop before
// AllowRebalance, so the assignment cannot change underneath it.
func (a *Applier) rewind(ctx context.Context, at time.Time) {
	ws := a.snapshot()
	if len(ws) == 0 {
		return
	}
	// One lookup at the earliest target of our partitions: rewinding a bit
	// further than needed is only re-applying idempotent records.
	target := at.Add(-a.cfg.HardLifetime)
	for _, w := range ws {
		w.qmu.Lock()
		if !w.appliedTime.IsZero() {
			if t := w.appliedTime.Add(-a.cfg.HardLifetime); t.Before(target) {
				target = t // lag = at - appliedTime
			}
		}
		w.qmu.Unlock()
	}
	var listed map[int32]int64
	err := retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "list offsets for rewind", func(ctx context.Context) error {
		lo, err := a.adm.ListOffsetsAfterMilli(ctx, target.UnixMilli(), a.cfg.Topic)
		if err != nil {
			return err
		}
		if err := lo.Error(); err != nil {
			return err
		}
		listed = make(map[int32]int64)
		lo.Each(func(o kadm.ListedOffset) { listed[o.Partition] = o.Offset })
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			a.fail(fmt.Errorf("applier: rewind after failover: %w", err))
		}
		return
	}
	set := map[int32]kgo.EpochOffset{}
	for _, w := range ws {
		off, ok := listed[w.p]
		if !ok || off < 0 {
			continue
		}
		w.qmu.Lock()
		// Never move forward past records not yet applied.
		pos := w.next
		if pos < 0 {
			pos = w.firstSeen
		}
		if pos >= 0 && off > pos {
			off = pos
		}
		if pos < 0 {
			w.qmu.Unlock()
			continue // nothing fetched yet: consumption starts at the commit anyway
		}
		w.epoch++ // queued records from before the rewind are dropped
		w.queue, w.queuedN = nil, 0
		if w.paused {
			w.paused = false
			a.cl.ResumeFetchPartitions(map[string][]int32{a.cfg.Topic: {w.p}})
		}
		w.next, w.leaderEpoch, w.firstSeen = off, -1, off
		w.pendingSince = time.Time{}
		w.qmu.Unlock()
		set[w.p] = kgo.EpochOffset{Epoch: -1, Offset: off}
	}
	a.cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{a.cfg.Topic: set})
	a.log.Warn("partitions rewound after cache-tier failover", "since", target.UTC().Format(time.RFC3339Nano), "offsets", fmt.Sprint(set))
}
