package reader

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// replicaRead answers from a copy of a hot key when this process holds the
// key's manifest (learnt from a lookup at most ReplicaManifestTTL ago) of at
// least minVersion; spread picks the copy. ok is false when the read must go
// to the primary. It runs inside the key's shared resolution, and offers
// what it read to L1 as a primary hit is, its window counted from the
// lookup that gave the manifest (never longer than the manifest is held).
func (rd *Reader) replicaRead(ctx context.Context, tenant, id string, minVersion int64, spread uint64) (Result, bool) {
	if use, _ := rd.cacheable(); !use {
		return Result{}, false
	}
	e, sent, ok := rd.replicas.ReadSent(ctx, tenant, id, minVersion, spread)
	if !ok {
		return Result{}, false
	}
	// sent is by rd.clock.Now; L1 counts by the wall clock: the same age.
	wall := rd.clock.Wall()
	rd.l1.offer(tenant+"\x00"+id, e.Version, e.Payload, e.EffObs, e.Hard, wall.Add(-rd.clock.Now().Sub(sent)), wall)
	return Result{Kind: Found, Version: e.Version, Payload: e.Payload, EffObs: e.EffObs, Hard: e.Hard,
		CacheStatus: "tidemark; hit; detail=replica"}, true
}

// offerManifest tells the replica reader what a lookup sent at sent said:
// the manifest of a hit, or none.
func (rd *Reader) offerManifest(tenant, id string, lr cache.LookupResult, sent time.Time) {
	var m *cache.Manifest
	if lr.Status == cache.StatusHit {
		m = lr.Replicas
	}
	rd.replicas.Offer(tenant, id, m, sent)
}
