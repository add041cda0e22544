package reader

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// replicaRead answers from a copy of a hot key when this process holds the
// key's manifest (learnt from a lookup at most ReplicaManifestTTL ago) of at
// least minVersion; spread picks the copy. ok is false when the read must go
// to the primary.
func (rd *Reader) replicaRead(ctx context.Context, tenant, id string, minVersion int64, spread uint64) (Result, bool) {
	if !rd.clock.Trusted() {
		return Result{}, false
	}
	e, ok := rd.replicas.Read(ctx, tenant, id, minVersion, spread)
	if !ok {
		return Result{}, false
	}
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
