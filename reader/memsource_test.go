package reader

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// memSource is a Source over a map, standing in for the catalog table: the
// reader's behaviour (budget, min_version, deadlines, leases) is the same
// whatever the source is, and api's tests cover the Postgres one. It
// counts its reads, and while stalled it answers nothing until the read's
// deadline, as a paused Postgres would.
type memSource struct {
	mu      sync.Mutex
	items   map[string]Item
	stalled bool
	reads   atomic.Int64
}

func newMemSource() *memSource { return &memSource{items: map[string]Item{}} }

func (s *memSource) set(tenant, item string, version int64, payload string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[tenant+"\x00"+item] = Item{Found: true, Version: version, Payload: []byte(payload)}
}

func (s *memSource) stall(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalled = on
}

func (s *memSource) Read(ctx context.Context, tenant, item string) (Item, error) {
	s.reads.Add(1)
	s.mu.Lock()
	it, stalled := s.items[tenant+"\x00"+item], s.stalled
	s.mu.Unlock()
	if stalled {
		<-ctx.Done()
		return Item{}, ctx.Err()
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
