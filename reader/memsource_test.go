package reader

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tidemark/tidemark/lab/testenv"
)

// memSource is a Source over a map, standing in for the catalog table: the
// reader's behaviour (budget, min_version, deadlines, leases) is the same
// whatever the source is, and api's tests cover the Postgres one. It
// counts its reads (and those of each budget class); while stalled it
// answers nothing until the read's deadline, as a paused Postgres would;
// while down it fails at once, as a stopped one does; delay slows every
// read; afterRead, when set, runs after a read and before the reader sees
// it (a test pauses a reader between its read and its fill there).
type memSource struct {
	mu        sync.Mutex
	items     map[string]Item
	stalled   bool
	down      bool
	delay     time.Duration
	byClass   map[string]int64
	afterRead func(tenant, item string, it Item)
	reads     atomic.Int64
}

func newMemSource() *memSource {
	return &memSource{items: map[string]Item{}, byClass: map[string]int64{}}
}

func (s *memSource) set(tenant, item string, version int64, payload string) {
	s.put(tenant, item, Item{Found: true, Version: version, Payload: []byte(payload)})
}

// put stores it as the item's row (Found false with a Version: a tombstone).
func (s *memSource) put(tenant, item string, it Item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[tenant+"\x00"+item] = it
}

func (s *memSource) stall(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = on
}

func (s *memSource) fail(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = on
}

// classReads is how many reads of class the source saw.
func (s *memSource) classReads(class string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byClass[class]
}

// errSourceDown is what a down memSource answers: a failed read, never an
// answer about the item.
var errSourceDown = errors.New("memsource: source down")

func (s *memSource) Read(ctx context.Context, tenant, item string) (Item, error) {
	s.reads.Add(1)
	s.mu.Lock()
	it, stalled, down, delay, after := s.items[tenant+"\x00"+item], s.stalled, s.down, s.delay, s.afterRead
	s.byClass[ClassOf(ctx)]++
	s.mu.Unlock()
	if down {
		return Item{}, errSourceDown
	}
	if stalled {
		<-ctx.Done()
		return Item{}, ctx.Err()
	}
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return Item{}, ctx.Err()
		}
	}
	if after != nil {
		after(tenant, item, it)
	}
	return it, nil
}

// getAdmitted is rd.Get(q) asked again while the source budget refuses it:
// a fresh budget starts empty, and its refusals are not what the caller
// tests.
func getAdmitted(t *testing.T, rd *Reader, q Query) Result {
	t.Helper()
	var r Result
	testenv.Eventually(t, 20*time.Second, "the source budget admits the read", func() error {
		r = rd.Get(t.Context(), q)
		if r.Kind == Unavailable && strings.HasSuffix(r.CacheStatus, "detail=budget") {
			return fmt.Errorf("refused: %q", r.CacheStatus)
		}
		return nil
	})
	return r
}

// counterValue is the value of one counter series of a Reader's metrics.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
