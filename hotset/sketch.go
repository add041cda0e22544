package hotset

import (
	"container/heap"
	"math"
	"sort"
)

// spaceSaving is the Space-Saving heavy-hitters sketch (Metwally et al.) over
// one tenant's item ids: at most capacity counters, whatever the key space.
// An unseen item replaces the smallest counter and inherits its count (kept
// as err, the overestimate), so a flood of distinct ids only ever churns the
// bottom of the table and never pushes out an item read more often than the
// churned ones. Counts are decayed by scaling, which keeps the order and the
// error bounds.
type spaceSaving struct {
	capacity int
	idx      map[string]*counter
	h        counterHeap // min-heap by count
	total    float64     // decayed reads, for choosing which tenant to drop
}

type counter struct {
	item       string
	count, err float64
	pending    float64 // reads observed since the last merge (exact, not inherited)
	// fast is the key's fast rate as of the last fast tick, fastPending
	// the reads since (fast.go).
	fast, fastPending float64
	i                 int // heap index
}

func newSpaceSaving(capacity int) *spaceSaving {
	return &spaceSaving{capacity: capacity, idx: make(map[string]*counter, capacity)}
}

func (s *spaceSaving) observe(item string) {
	s.total++
	if c, ok := s.idx[item]; ok {
		c.count++
		c.pending++
		c.fastPending++
		heap.Fix(&s.h, c.i)
		return
	}
	if len(s.h) < s.capacity {
		c := &counter{item: item, count: 1, pending: 1, fastPending: 1}
		s.idx[item] = c
		heap.Push(&s.h, c)
		return
	}
	c := s.h[0] // the smallest counter gives way
	delete(s.idx, c.item)
	c.item, c.err, c.count, c.pending = item, c.count, c.count+1, 1
	c.fast, c.fastPending = 0, 1 // a rate is not inherited: it would make a scanned id look hot
	s.idx[item] = c
	heap.Fix(&s.h, 0)
}

// decay multiplies every count by f (0 < f <= 1).
func (s *spaceSaving) decay(f float64) {
	for _, c := range s.h {
		c.count *= f
		c.err *= f
	}
	s.total *= f
}

// Entry is one tracked item with its estimated decayed count.
type Entry struct {
	Tenant, Item string
	Count        float64 // decayed reads (an overestimate by at most Err)
	Err          float64
}

// top returns the n largest counters, largest first.
func (s *spaceSaving) top(tenant string, n int) []Entry {
	out := make([]Entry, 0, len(s.h))
	for _, c := range s.h {
		out = append(out, Entry{Tenant: tenant, Item: c.item, Count: c.count, Err: c.err})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// takePending returns the reads observed per item since the last call and
// resets them.
func (s *spaceSaving) takePending(fn func(item string, n float64)) {
	for _, c := range s.h {
		if c.pending > 0 {
			fn(c.item, c.pending)
			c.pending = 0
		}
	}
}

// takeAll returns every counter's guaranteed decayed count (count - err)
// and resets the pending reads.
func (s *spaceSaving) takeAll(fn func(item string, n float64)) {
	for _, c := range s.h {
		if n := c.count - c.err; n > 0 {
			fn(c.item, n)
		}
		c.pending = 0
	}
}

type counterHeap []*counter

func (h counterHeap) Len() int           { return len(h) }
func (h counterHeap) Less(i, j int) bool { return h[i].count < h[j].count }
func (h counterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].i, h[j].i = i, j
}
func (h *counterHeap) Push(x any) {
	c := x.(*counter)
	c.i = len(*h)
	*h = append(*h, c)
}
func (h *counterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// decayFactor is exp(-dt/tau): the weight left after dt of a read with time
// constant tau.
func decayFactor(dtSeconds, tauSeconds float64) float64 {
	return math.Exp(-dtSeconds / tauSeconds)
}
