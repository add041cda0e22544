package reader

import (
	"strconv"
	"testing"
	"time"
)

// Above its share a tenant's first miss of a key is not cached and its
// second within the window is; the doorkeeper forgets after two windows; a
// tenant within its share is not held back by another's scan.
func TestSecondHitAdmission(t *testing.T) {
	a := newAdmission(2)
	now := time.Unix(1000, 0)
	if !a.admit("scan", "c0", now) || !a.admit("scan", "c1", now) {
		t.Fatal("a new tenant's first second of its share is not admitted")
	}
	if a.admit("scan", "c2", now) {
		t.Fatal("first miss above the share admitted")
	}
	if !a.admit("scan", "c2", now.Add(time.Millisecond)) {
		t.Fatal("second miss within the window not admitted")
	}
	if a.admit("scan", "c3", now.Add(2*time.Millisecond)) {
		t.Fatal("another first miss above the share admitted")
	}
	if !a.admit("calm", "h1", now.Add(3*time.Millisecond)) {
		t.Fatal("a tenant within its share held back by another's scan")
	}
	later := now.Add(2*admissionWindow + time.Second)
	if !a.admit("scan", "x", later) || !a.admit("scan", "y", later) { // the refilled share
		t.Fatal("the share is not refilled")
	}
	if a.admit("scan", "c3", later) {
		t.Fatal("a miss from two windows ago still admitted")
	}
}

// A tenant scanning 100,000 cold ids at 700 misses/s, far over its share,
// gets almost none of them cached: no unconditional share while it is over,
// and a doorkeeper that never fills up answers few false second hits. A key
// it does miss twice is still admitted.
func TestScanLeaksFewFalseSecondHits(t *testing.T) {
	a := newAdmission(20)
	now := time.Unix(1000, 0)
	admitted := 0
	for i := range 100_000 {
		at := now.Add(time.Duration(i) * time.Second / 700)
		if a.admit("scan", "cold-"+strconv.Itoa(i), at) {
			admitted++
		}
		if i%1000 == 999 {
			// The calm tenant keeps within its share all along.
			if !a.admit("calm", "hot-"+strconv.Itoa(i), at) {
				t.Fatalf("calm tenant's miss %d not admitted", i)
			}
		}
	}
	// The first second of its share (10 fills) goes in before it is over.
	if limit := 10 + 100_000/500; admitted > limit {
		t.Fatalf("%d of 100,000 scanned ids admitted, want at most %d (0.2 %% false second hits)", admitted, limit)
	}
	end := now.Add(100_000 * time.Second / 700)
	a.admit("scan", "again", end)
	if !a.admit("scan", "again", end.Add(time.Second)) {
		t.Fatal("a second miss of a key within the window is not admitted")
	}
	t.Logf("%d of 100,000 scanned ids admitted", admitted)
}
