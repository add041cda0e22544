package e2ebench

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestDistIsNearestRankOfExactSamples(t *testing.T) {
	var d []time.Duration
	for i := 1000; i >= 1; i-- { // unsorted input
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	got := distOf(d)
	if got.N != 1000 || got.P50 != 501*time.Millisecond || got.P99 != 991*time.Millisecond || got.Max != time.Second {
		t.Fatalf("distOf(1..1000 ms) = %+v", got)
	}
}

// TestLagBoundedFlagsARisingTail: a tail that keeps growing is not bounded,
// a flat one with noise is.
func TestLagBoundedFlagsARisingTail(t *testing.T) {
	ms := func(v ...int) (out []time.Duration) {
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	if !bounded(ms(40, 55, 38, 60, 45, 50)) {
		t.Error("a flat tail was judged unbounded")
	}
	if bounded(ms(40, 80, 160, 320, 640, 1280)) {
		t.Error("a doubling tail was judged bounded")
	}
	base := time.Unix(1e9, 0)
	var s []sample
	for i := range 60 { // one sample per second, latency = i*10 ms
		s = append(s, sample{base.Add(time.Duration(i) * time.Second), time.Duration(i) * 10 * time.Millisecond})
	}
	w := windows(s, 55*time.Second)
	if len(w) != 5 || w[0] != 90*time.Millisecond || bounded(w) {
		t.Errorf("windows of a linear rise over a 55 s load = %v (bounded %v), want 5 full windows, the first's p99 90ms, unbounded", w, bounded(w))
	}
	// A 30 s load whose last timed commit came 29.9 s after its first has
	// three full windows; the third, where the tail rose, must be judged.
	var rise []sample
	for i := range 300 {
		d := 50 * time.Millisecond
		if i >= 200 {
			d = time.Second
		}
		rise = append(rise, sample{base.Add(time.Duration(i) * 100 * time.Millisecond), d})
	}
	if w := windows(rise, 30*time.Second+50*time.Millisecond); len(w) != 3 || w[2] != time.Second || bounded(w) {
		t.Errorf("windows of a 30 s load rising in its last 10 s = %v (bounded %v), want 3 windows, the last 1s, unbounded", w, bounded(w))
	}
	// A window no timed commit fell in is shown as such, in its place, and
	// the lag is judged on the others.
	gap := slices.DeleteFunc(slices.Clone(rise[:200]), func(x sample) bool { return x.commit.Sub(base) >= 10*time.Second })
	gap = append(gap, sample{base.Add(25 * time.Second), 60 * time.Millisecond})
	if w := windows(gap, 30*time.Second); len(w) != 3 || w[1] != noSamples || w[2] != 60*time.Millisecond || !bounded(w) {
		t.Errorf("windows of a load with nothing timed in its second 10 s = %v (bounded %v), want [50ms none 60ms], bounded", w, bounded(w))
	}
}

// The machine's busy time counts this process's CPU too.
func TestBoxCPUCountsBusyTime(t *testing.T) {
	b0, t0, err := boxCPU()
	if err != nil {
		t.Fatal(err)
	}
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := self()
	for x := 0; self()-start < 300*time.Millisecond; x++ {
	}
	b1, t1, err := boxCPU()
	if err != nil {
		t.Fatal(err)
	}
	if b1-b0 < 250*time.Millisecond || t1-t0 < b1-b0 {
		t.Fatalf("busy %s of %s while this process spun for 300ms", b1-b0, t1-t0)
	}
}
