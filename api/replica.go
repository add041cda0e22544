package api

import (
	"context"
	"hash/maphash"
	"net/http"
	"time"

	"tidemark/cache"
)

// readerSeed makes the copy a connection reads differ between processes, so
// many processes' connections spread over every copy.
var readerSeed = maphash.MakeSeed()

// readerHash is the stable hash a read picks its copy by: the client
// connection, so one connection keeps reading one copy (and the next one on
// retry) while connections spread evenly.
func readerHash(r *http.Request) uint64 { return maphash.String(readerSeed, r.RemoteAddr) }

// replicaRead answers from a copy of a hot key when this process holds the
// key's manifest (learnt from a lookup at most ReplicaManifestTTL ago) of at
// least minVersion. ok is false when the read must go to the primary.
func (s *Server) replicaRead(ctx context.Context, r *http.Request, tenant, id string, minVersion int64) (readResult, bool) {
	if !s.clock.Trusted() {
		return readResult{}, false
	}
	e, ok := s.replicas.Read(ctx, tenant, id, minVersion, readerHash(r))
	if !ok {
		return readResult{}, false
	}
	return readResult{kind: readItem, version: e.Version, payload: e.Payload, effObs: e.EffObs, hard: e.Hard,
		cacheStatus: "tidemark; hit; detail=replica"}, true
}

// offerManifest tells the replica reader what a lookup sent at sent said:
// the manifest of a hit, or none.
func (s *Server) offerManifest(tenant, id string, lr cache.LookupResult, sent time.Time) {
	var m *cache.Manifest
	if lr.Status == cache.StatusHit {
		m = lr.Replicas
	}
	s.replicas.Offer(tenant, id, m, sent)
}
