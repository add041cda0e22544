package reader

import (
	"testing"
	"time"
)

func TestWarnEveryLetsOnePerInterval(t *testing.T) {
	var w warnEvery
	t0 := time.Unix(1_000_000, 0)
	if !w.allow(t0) {
		t.Fatal("the first warning was held")
	}
	if w.allow(t0.Add(warnInterval - time.Millisecond)) {
		t.Fatal("a second warning within the interval was let through")
	}
	if !w.allow(t0.Add(warnInterval + time.Millisecond)) {
		t.Fatal("a warning past the interval was held")
	}
}
