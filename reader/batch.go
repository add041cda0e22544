package reader

import (
	"context"
	"sync"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// GetMany answers reads of many items of one tenant (a product page), each
// exactly as Get would answer it alone: its own version, freshness, hard
// deadline and Cache-Status. What L1 does not answer is looked up in one
// pipelined round trip (cache.LookupMany); a hit, a stale value (refreshed
// in the background as Get does) or a cached absence is answered from it.
// A miss reads the source under its lease; every other answer (a lease
// wait, an invalidated value, a deadline our clock says has passed, a
// lookup error) gives its lease back and takes Get's path, so the read
// algorithm has one definition. So do a hot key whose copies this process
// knows (it reads a copy inside the key's shared resolution, as Get does)
// and every item while the cache may not be used (an untrusted clock, a
// namespace bound to another deployment: Get reads the source). The misses
// and the rest run concurrently. out[i] answers ids[i]; ids must be
// distinct.
func (rd *Reader) GetMany(ctx context.Context, tenant string, ids []string, spread uint64) []Result {
	out := make([]Result, len(ids))
	use, _ := rd.cacheable()
	rest := make([]int, 0, len(ids))
	var slow []int
	now := rd.clock.Wall()
	for i, id := range ids {
		if !use || rd.replicas.Holds(tenant, id) {
			slow = append(slow, i)
			continue
		}
		if e, ok := rd.l1.get(tenant+"\x00"+id, 0, now); ok {
			rd.m.l1Hits.Inc()
			out[i] = rd.lastCheck(ctx, tenant, id, 0, Result{Kind: Found, Version: e.version,
				Payload: e.payload, EffObs: e.effObs, Hard: e.hard, CacheStatus: "tidemark; hit; detail=l1"})
			continue
		}
		rest = append(rest, i)
	}
	if len(rest) == 0 && len(slow) == 0 {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, rd.cfg.RequestTimeout)
	defer cancel()
	var misses []missed
	if len(rest) > 0 {
		var s []int
		s, misses = rd.lookupMany(ctx, tenant, ids, rest, out)
		slow = append(slow, s...)
	}
	var wg sync.WaitGroup
	for _, m := range misses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[m.i] = rd.lastCheck(ctx, tenant, ids[m.i], 0, rd.fetch(ctx, tenant, ids[m.i], 0, m.tok, ""))
		}()
	}
	for _, i := range slow {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = rd.Get(ctx, Query{Tenant: tenant, Item: ids[i], Spread: spread})
		}()
	}
	wg.Wait()
	return out
}

// missed is a batch item whose lookup was a miss with a lease.
type missed struct {
	i   int
	tok cache.Token
}

// lookupMany answers ids[rest] from one pipelined lookup into out, and
// returns what it could not answer: slow for Get's path, misses to read
// under their leases.
func (rd *Reader) lookupMany(ctx context.Context, tenant string, ids []string, rest []int, out []Result) (slow []int, misses []missed) {
	items := make([]string, len(rest))
	for j, i := range rest {
		items[j] = ids[i]
	}
	lctx, lcancel := context.WithTimeout(ctx, rd.cfg.LookupTimeout)
	sent, sentWall := rd.clock.Now(), rd.clock.Wall()
	lrs, errs, err := rd.cache.LookupMany(lctx, tenant, items)
	lcancel()
	if err != nil {
		rd.log.Debug("batch lookup failed; reading item by item", "tenant", tenant, "items", len(items), "err", err)
		return rest, nil
	}
	for j, i := range rest {
		lr, id := lrs[j], ids[i]
		if errs[j] != nil {
			slow = append(slow, i)
			continue
		}
		rd.offerManifest(tenant, id, lr, sent)
		if rr, ok := rd.settled(tenant, id, lr, sentWall); ok {
			out[i] = rd.lastCheck(ctx, tenant, id, 0, rr)
			continue
		}
		if lr.Status == cache.StatusMiss && !lr.Token.IsZero() {
			misses = append(misses, missed{i, lr.Token})
			continue
		}
		rd.releaseLease(ctx, tenant, id, lr.Token)
		slow = append(slow, i)
	}
	return slow, misses
}

// settled is resolve's answer to a lookup that needs no source read, no
// wait and no fill: a hit, a stale value that is not invalidated, a cached
// absence (min_version 0), each within the hard deadline by our clock.
func (rd *Reader) settled(tenant, id string, lr cache.LookupResult, sentWall time.Time) (Result, bool) {
	e := lr.Entry
	switch lr.Status {
	case cache.StatusHit:
		if !rd.clock.Now().Before(e.Hard) {
			return Result{}, false
		}
		rd.l1.offer(tenant+"\x00"+id, e.Version, e.Payload, e.EffObs, e.Hard, sentWall, rd.clock.Wall())
		return Result{Kind: Found, Version: e.Version, Payload: e.Payload, EffObs: e.EffObs, Hard: e.Hard, CacheStatus: "tidemark; hit"}, true
	case cache.StatusStale:
		if e.Stale || !rd.clock.Now().Before(e.Hard) {
			return Result{}, false
		}
		if !lr.Token.IsZero() {
			rd.refreshInBackground(tenant, id, lr.Token)
		}
		return Result{Kind: Found, Version: e.Version, Payload: e.Payload, EffObs: e.EffObs, Hard: e.Hard, CacheStatus: "tidemark; hit; detail=stale"}, true
	case cache.StatusNotFound:
		return Result{Kind: NotFound, Hard: e.Hard, CacheStatus: "tidemark; hit; detail=not-found"}, true
	}
	return Result{}, false
}
