package applier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/promise"
)

// monitorLoop watches the cache tier's identity (a restart or failover loses
// recently applied floors) and keeps the watermark hash's partition count
// equal to the topic's.
func (a *Applier) monitorLoop(ctx context.Context) {
	idT := time.NewTicker(a.cfg.IdentityInterval)
	defer idT.Stop()
	topicT := time.NewTicker(a.cfg.TopicInterval)
	defer topicT.Stop()
	growT := time.NewTicker(time.Second)
	defer growT.Stop()
	var growUntil time.Time
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
		case <-a.identityKick:
			if a.checkIdentity(ctx) {
				a.syncPartitions(ctx)
			}
		case <-topicT.C:
			a.syncPartitions(ctx)
			a.reclaimGroup(ctx)
		case <-a.growKick:
			a.cl.ForceMetadataRefresh()
			growUntil = time.Now().Add(growRefreshFor)
		case <-growT.C:
			if time.Now().Before(growUntil) {
				a.cl.ForceMetadataRefresh()
			}
		}
	}
}

// preflight runs before the applier joins its group: it refuses a cache
// tier that may evict the watermark hash, and compares the tier's identity
// with the one stored beside the watermark, so a restart or failover that
// happened while no applier ran is not taken as the baseline.
func (a *Applier) preflight(ctx context.Context) error {
	bo := backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}
	var policyErr error
	err := retry(ctx, bo, a.log, "check maxmemory-policy", func(ctx context.Context) error {
		err := a.cache.CheckEvictionPolicy(ctx)
		if errors.Is(err, cache.ErrEvictionPolicy) {
			policyErr = err
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if policyErr != nil {
		return fmt.Errorf("applier: %w", policyErr)
	}
	// Before joining: a group of another namespace, or a namespace bound
	// to another group, is refused without taking a partition from its
	// appliers.
	if err := a.claimGroup(ctx); err != nil {
		return err
	}
	if err := a.checkGroupNamespace(ctx, nil); err != nil {
		return err
	}

	var (
		id string
		wm cache.Watermark
	)
	err = retry(ctx, bo, a.log, "read cache tier identity", func(ctx context.Context) error {
		var err error
		id, wm, err = a.readIdentity(ctx)
		return err
	})
	if err != nil {
		return err
	}
	a.identityOKAt.Store(time.Now().UnixNano())
	var reason string
	switch {
	case wm.Identity != "" && cache.IdentityServer(wm.Identity) != id:
		reason = "identity differs from the one stored with the watermark"
	case !wm.Found:
		applied, err := a.groupHasCommits(ctx)
		if err != nil {
			return err
		}
		if applied {
			reason = "watermark hash missing although the group has applied records"
		}
	}
	if reason == "" {
		if wm.Identity == "" {
			a.log.Info("no cache tier identity stored yet: taking the current one as the baseline", "identity", id)
		}
		return a.bindIdentity(ctx, id)
	}
	at := time.Now()
	a.log.Warn("cache tier restarted, failed over or lost the watermark hash while no applier watched: setting reset_at and rewinding partitions as they are assigned",
		"reason", reason, "stored_identity", wm.Identity, "identity", id, "rewind_span", rewindSpan.String())
	a.met.failoverRewinds.Inc()
	// reset_at by the cache tier's clock plus the margin, not this host's.
	err = retry(ctx, bo, a.log, "set reset_at after failover", func(ctx context.Context) error { _, err := a.cache.MarkGapNow(ctx); return err })
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.startRewind = at
	a.mu.Unlock()
	return a.bindIdentity(ctx, id) // only once reset_at is in place
}

// errIdentityMoved: the cache tier's server identity changed between the
// reads of readIdentity.
var errIdentityMoved = errors.New("applier: the cache tier restarted or failed over while its identity and watermark were read")

// readIdentity reads the cache tier's server identity and the watermark
// hash, and the identity again: the watermark read is from the server
// named only if both reads agree (a restart between the first two reads
// would show the old server's identity with the new server's missing
// hash, and bind the old identity to the new server: a second rewind).
func (a *Applier) readIdentity(ctx context.Context) (string, cache.Watermark, error) {
	id, err := a.cache.ServerIdentity(ctx)
	if err != nil {
		return "", cache.Watermark{}, err
	}
	wm, err := a.cache.ReadWatermark(ctx)
	if err != nil {
		return "", cache.Watermark{}, err
	}
	again, err := a.cache.ServerIdentity(ctx)
	if err != nil {
		return "", cache.Watermark{}, err
	}
	if again != id {
		return "", cache.Watermark{}, fmt.Errorf("%w (%s, then %s)", errIdentityMoved, id, again)
	}
	return id, wm, nil
}

// bindIdentity binds the watermark hash to the cache tier's server identity
// (cache.BindWatermarkIdentity) and adopts the identity stored, which every
// watermark this applier writes then carries: a hash lost or bound anew
// refuses them, so the loss is noticed (checkIdentity) instead of written
// over. Binding after a reset (never before) keeps an applier that adopts
// the new identity from skipping a reset_at it has not seen.
func (a *Applier) bindIdentity(ctx context.Context, server string) error {
	var id string
	err := retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "bind the watermark identity", func(ctx context.Context) error {
		var err error
		id, err = a.cache.BindWatermarkIdentity(ctx, server)
		return err
	})
	if err != nil {
		return err
	}
	a.identity.Store(&id)
	return nil
}

// kickIdentity asks monitorLoop to check the identity now (a watermark
// write was refused for it).
func (a *Applier) kickIdentity() {
	select {
	case a.identityKick <- struct{}{}:
	default: // a check is already asked for
	}
}

// refreshTopic has the Kafka client read the topic's metadata again as soon
// as its minimum age allows, and again each time it allows for
// growRefreshFor: a marker said the topic has more partitions than the
// watermark counted, and the group's leader assigns the new ones when its
// client sees them (the watermark is unknown until then), instead of at
// the metadata max age (TopicInterval). Once is not enough: a broker's
// metadata may not show the new partitions yet right after they were
// created (Apache Kafka's brokers learn them from the controller).
func (a *Applier) refreshTopic() {
	select {
	case a.growKick <- struct{}{}:
	default: // one is pending
	}
}

// growRefreshFor is how long refreshTopic keeps the topic's metadata read
// again (at most every MetadataMinAge, 5 s).
const growRefreshFor = 15 * time.Second

// groupHasCommits reports whether the group committed offsets on the topic:
// an applier of it has run, so the watermark hash should exist.
func (a *Applier) groupHasCommits(ctx context.Context) (bool, error) {
	for _, off := range a.committedOffsets(ctx) {
		if off > 0 {
			return true, nil
		}
	}
	return false, ctx.Err()
}

// verifiedIdentity is the identity workers store with each watermark.
func (a *Applier) verifiedIdentity() string {
	if id := a.identity.Load(); id != nil {
		return *id
	}
	return ""
}

// checkIdentity reports whether the cache tier changed under us: its server
// identity differs from the one bound, or the watermark hash no longer holds
// the identity this applier bound (the hash was lost: a flush or an
// eviction, recreated or not; or another applier reset and bound it anew).
// On a change it sets reset_at = now (entries observed before it may no
// longer be extended by the watermark), binds the hash again and asks the
// poll loop to rewind.
func (a *Applier) checkIdentity(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	id, wm, err := a.readIdentity(rctx)
	cancel()
	if err != nil {
		return false // unreachable or restarted between the reads: the workers retry; we look again next tick
	}
	a.identityOKAt.Store(time.Now().UnixNano())
	old := a.verifiedIdentity()
	if old == "" {
		_ = a.bindIdentity(ctx, id) // fails only when stopping
		return false
	}
	var reason string
	switch {
	case cache.IdentityServer(old) != id:
		reason = "identity changed"
	case !wm.Found:
		reason = "watermark hash missing"
	case wm.Identity != old:
		reason = "watermark hash lost its identity or was bound anew by another applier"
	default:
		return false
	}
	at := time.Now()
	a.log.Warn("cache tier restarted, failed over or lost the watermark hash: setting reset_at and rewinding partitions",
		"reason", reason, "old_identity", old, "new_identity", id, "rewind_span", rewindSpan.String()+" + lag")
	a.met.failoverRewinds.Inc()
	err = retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "set reset_at after failover",
		func(ctx context.Context) error { _, err := a.cache.MarkGapNow(ctx); return err })
	if err != nil {
		return false // stopping
	}
	// Only now may watermarks carry a new identity: an applier that finds
	// it stored knows reset_at already covers the change.
	if err := a.bindIdentity(ctx, id); err != nil {
		return false // stopping
	}
	select {
	case a.rewindC <- at:
	default: // a rewind is already pending; the earlier time covers more
	}
	return true
}

// committedOffsets reads the group's committed offsets on the topic
// (retrying; empty only when ctx ends, or when Kafka denies the read and
// the stage stops).
func (a *Applier) committedOffsets(ctx context.Context) map[int32]int64 {
	out := map[int32]int64{}
	err := retry(ctx, backoff{a.cfg.BackoffMin, a.cfg.BackoffMax}, a.log, "fetch committed offsets", func(ctx context.Context) error {
		resp, err := a.adm.FetchOffsets(ctx, a.cfg.Group)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil // a new group: nothing committed
		}
		if err != nil {
			return err
		}
		resp.Each(func(o kadm.OffsetResponse) {
			if o.Topic == a.cfg.Topic && o.Err == nil && o.At >= 0 {
				out[o.Partition] = o.At
			}
		})
		return nil
	})
	if err != nil && ctx.Err() == nil {
		a.fail(err)
	}
	return out
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
		// Normal until capture has created it; retried every TopicInterval,
		// not ready meanwhile (Ready).
		if !a.topicMissing.Swap(true) {
			a.log.Info("topic does not exist yet", "topic", a.cfg.Topic)
		}
		return
	}
	a.topicMissing.Store(false)
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

// rewindSpan is how far back a rewind reaches (plus the partition's lag):
// the longest any process may give an entry, not this process's
// --cache-hard-lifetime, which a serve process beside it may have set
// longer.
const rewindSpan = promise.HardLifetime

// rewind moves every owned partition back to the offset at
// now - (rewindSpan + lag), where lag is how far behind the partition's
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
	target := at.Add(-rewindSpan)
	for _, w := range ws {
		w.qmu.Lock()
		if !w.appliedTime.IsZero() {
			if t := w.appliedTime.Add(-rewindSpan); t.Before(target) {
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
	// A partition that fetched nothing since it was assigned sits at its
	// committed offset, which may be past invalidations Redis just lost.
	committed := a.committedOffsets(ctx)
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
		if pos < 0 {
			if c, ok := committed[w.p]; ok {
				pos = c
			}
		}
		if pos < 0 {
			w.qmu.Unlock()
			continue // nothing committed: consumption starts at the log start anyway
		}
		if off > pos {
			off = pos
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
