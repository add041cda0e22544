package e2ebench

import (
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
	w := windows(s, 10*time.Second)
	if len(w) != 5 || w[0] != 90*time.Millisecond || bounded(w) {
		t.Errorf("windows of a linear rise = %v (bounded %v), want 5 full windows, the first's p99 90ms, unbounded", w, bounded(w))
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
