package applier

import (
	"math"
	"testing"
	"time"
)

// Versions above 2^53 reach Redis exactly: each one-higher version raises
// the floor (a double-based comparison would call 2^53+1 a duplicate of
// 2^53 and keep the older floor for ever).
func TestVersionsAboveTwoToThe53ThroughApplier(t *testing.T) {
	r := newRig(t, 1)
	run := r.start(r.config(), nil)
	final := map[string]int64{"big": 1<<53 + 1, "max": math.MaxInt64}
	r.produce(r.prod, changeRecord(change{"t1", "big", 1 << 53}, time.Now()),
		changeRecord(change{"t1", "max", math.MaxInt64 - 1}, time.Now()))
	r.exactFloors(20*time.Second, map[string]int64{"big": 1 << 53, "max": math.MaxInt64 - 1})
	r.produce(r.prod, changeRecord(change{"t1", "big", 1<<53 + 1}, time.Now()),
		changeRecord(change{"t1", "max", math.MaxInt64}, time.Now()))
	r.exactFloors(20*time.Second, final)
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	if c := run.a.Counts(); c.Applied != 4 || c.DLQ != 0 {
		t.Fatalf("counts %+v, want 4 applied", c)
	}
}
