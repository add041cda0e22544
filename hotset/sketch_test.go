package hotset

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// Under a zipf stream mixed with a scan of half a million distinct cold ids,
// the sketch keeps its fixed size, its top 10 are the stream's 10 hottest in
// order, and no scanned id reaches the top 20.
func TestSketchFindsHeavyHittersUnderScan(t *testing.T) {
	s := newSpaceSaving(256)
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.1, 1, 99_999)
	for i := range 500_000 {
		s.observe("hot" + strconv.FormatUint(z.Uint64(), 10))
		s.observe("cold" + strconv.Itoa(i)) // every one new
	}
	if len(s.h) != 256 || len(s.idx) != 256 {
		t.Fatalf("sketch holds %d counters (%d indexed), want 256", len(s.h), len(s.idx))
	}
	top := s.top("t", 20)
	for rank, e := range top {
		if rank >= 10 && strings.HasPrefix(e.Item, "hot") {
			continue
		}
		if e.Item != "hot"+strconv.Itoa(rank) {
			t.Errorf("rank %d is %s (count %.0f, err %.0f), want hot%d", rank, e.Item, e.Count, e.Err, rank)
		}
	}
	s.decay(0.5)
	if got := s.top("t", 1)[0]; got.Item != "hot0" || got.Count > float64(top[0].Count)/2+1e-9 {
		t.Errorf("after decay(0.5) top is %+v, was %+v", got, top[0])
	}
}
