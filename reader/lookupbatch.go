package reader

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// lookups sends the cache lookups of L1 misses that coincide as one
// pipelined round trip (cache.LookupMany) instead of one each: while a
// round trip is in flight, the lookups that arrive queue, and when it
// returns, the first of them sends the whole queue. A lookup that finds
// nothing in flight is sent at once, alone, so a quiet process waits for
// nothing it did not wait for before. Each answer is the single lookup's
// (the same script per key; cache.LookupMany), and its sent times are the
// round trip's own, which the L1 window and the replica manifest count from.
//
// Only reads of min_version 0 are batched (LookupMany has none); a
// min_version read looks up alone.
type lookups struct {
	cache Cache
	clock Clock
	max   int // lookups per round trip at most (0: batching off)
	// queueWait is the longest a queued lookup waits for the round trip in
	// flight (maxLookupQueueWait; a test that holds a round trip raises it).
	queueWait time.Duration

	mu    sync.Mutex
	busy  bool          // a round trip of queued lookups is in flight
	queue []*lookupCall // arrived while busy, in arrival order
}

// lookupCall is one lookup waiting in the queue or in flight.
type lookupCall struct {
	tenant, item string
	ctx          context.Context // the caller's: a round trip of this call alone runs on it
	deadline     time.Time       // ctx's: a round trip of several is bounded by the earliest of them
	wake         chan struct{}   // closed when answered, or when it leads the next round trip
	batch        []*lookupCall   // set when woken to lead: the round trip it sends (itself first)
	queued       bool            // under lookups.mu: still in the queue (its caller may leave)

	res            cache.LookupResult
	err            error
	sent, sentWall time.Time // when its round trip was sent, by the guarded and the wall clock
}

// maxLookupQueueWait is the longest a lookup waits in the queue for the
// round trip in flight before it is sent alone.
const maxLookupQueueWait = 10 * time.Millisecond

func newLookups(c Cache, clock Clock, maxBatch int) *lookups {
	return &lookups{cache: c, clock: clock, max: maxBatch, queueWait: maxLookupQueueWait}
}

// errLookupLeft: the caller's deadline passed while its lookup was still
// queued (it was never sent).
var errLookupLeft = errors.New("reader: cache lookup not sent before its deadline")

// lookup is cache.Lookup of (tenant, item, minVersion) within ctx, and when
// it was sent (Clock.Now and Clock.Wall).
func (l *lookups) lookup(ctx context.Context, tenant, item string, minVersion int64) (lr cache.LookupResult, sent, sentWall time.Time, err error) {
	if minVersion != 0 || l.max < 2 {
		sent, sentWall = l.clock.Now(), l.clock.Wall()
		lr, err = l.cache.Lookup(ctx, tenant, item, minVersion)
		return lr, sent, sentWall, err
	}
	c := &lookupCall{tenant: tenant, item: item, ctx: ctx, wake: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok {
		c.deadline = dl
	}
	l.mu.Lock()
	if !l.busy {
		l.busy = true
		l.mu.Unlock()
		l.lead([]*lookupCall{c})
		return c.res, c.sent, c.sentWall, c.err
	}
	c.queued = true
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	// The round trip in flight normally returns within a fraction of a
	// millisecond. One that does not (a Redis node hanging) holds up only
	// the lookups already in it: a queued one stops waiting after
	// maxLookupQueueWait and is sent alone, as it would have been without
	// batching.
	t := time.NewTimer(l.queueWait)
	defer t.Stop()
	select {
	case <-c.wake:
	case <-ctx.Done():
		if l.leave(c) {
			return cache.LookupResult{}, time.Time{}, time.Time{}, errors.Join(errLookupLeft, ctx.Err())
		}
		<-c.wake // taken into a round trip bounded by the earliest deadline in it, this one's included
	case <-t.C:
		if l.leave(c) {
			sent, sentWall = l.clock.Now(), l.clock.Wall()
			lr, err = l.cache.Lookup(ctx, tenant, item, 0)
			return lr, sent, sentWall, err
		}
		<-c.wake
	}
	if c.batch != nil { // woken to send the queue
		l.lead(c.batch)
	}
	return c.res, c.sent, c.sentWall, c.err
}

// leave takes c out of the queue if it is still there (not yet taken into
// a round trip), and reports whether it was.
func (l *lookups) leave(c *lookupCall) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !c.queued {
		return false
	}
	c.queued = false
	l.queue = removeCall(l.queue, c)
	return true
}

// lead sends batch as one round trip, answers its calls, then hands the
// queue that built up meanwhile to its first call (which sends it), or marks
// the lookups idle.
func (l *lookups) lead(batch []*lookupCall) {
	l.send(batch)
	for _, c := range batch[1:] {
		close(c.wake)
	}
	l.mu.Lock()
	n := min(len(l.queue), l.max)
	if n == 0 {
		l.busy = false
		l.mu.Unlock()
		return
	}
	next := make([]*lookupCall, n)
	copy(next, l.queue)
	l.queue = append(l.queue[:0], l.queue[n:]...)
	for _, c := range next {
		c.queued = false
	}
	next[0].batch = next
	l.mu.Unlock()
	close(next[0].wake)
}

// send looks batch up in one round trip per tenant (LookupMany is one
// tenant's), within the earliest deadline of its calls.
func (l *lookups) send(batch []*lookupCall) {
	if len(batch) == 1 { // alone: on its caller's context, no timer of its own
		c := batch[0]
		c.sent, c.sentWall = l.clock.Now(), l.clock.Wall()
		c.res, c.err = l.cache.Lookup(c.ctx, c.tenant, c.item, 0)
		return
	}
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	var dl time.Time
	for _, c := range batch {
		if !c.deadline.IsZero() && (dl.IsZero() || c.deadline.Before(dl)) {
			dl = c.deadline
		}
	}
	if !dl.IsZero() {
		ctx, cancel = context.WithDeadline(ctx, dl)
	}
	defer cancel()
	sent, sentWall := l.clock.Now(), l.clock.Wall()
	for _, c := range batch {
		c.sent, c.sentWall = sent, sentWall
	}
	if oneTenant(batch) { // the usual case: no grouping, no goroutine
		l.sendTenant(ctx, batch[0].tenant, batch)
		return
	}
	byTenant := map[string][]*lookupCall{}
	for _, c := range batch {
		byTenant[c.tenant] = append(byTenant[c.tenant], c)
	}
	var wg sync.WaitGroup
	for tenant, calls := range byTenant {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.sendTenant(ctx, tenant, calls)
		}()
	}
	wg.Wait()
}

// sendTenant is one tenant's part of a round trip.
func (l *lookups) sendTenant(ctx context.Context, tenant string, calls []*lookupCall) {
	if len(calls) == 1 {
		c := calls[0]
		c.res, c.err = l.cache.Lookup(ctx, tenant, c.item, 0)
		return
	}
	items := make([]string, len(calls))
	for i, c := range calls {
		items[i] = c.item
	}
	out, errs, err := l.cache.LookupMany(ctx, tenant, items)
	for i, c := range calls {
		switch {
		case err != nil:
			c.err = err
		case errs[i] != nil:
			c.err = errs[i]
		default:
			c.res = out[i]
		}
	}
}

func oneTenant(batch []*lookupCall) bool {
	for _, c := range batch[1:] {
		if c.tenant != batch[0].tenant {
			return false
		}
	}
	return true
}

func removeCall(q []*lookupCall, c *lookupCall) []*lookupCall {
	for i, x := range q {
		if x == c {
			return append(q[:i], q[i+1:]...)
		}
	}
	return q
}
