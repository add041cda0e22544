package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/lab/testenv"
)

// A process whose clock runs 2 s fast is not ready (/readyz fails with the
// clock offset); one with a good clock is. What the reader does with an
// untrusted clock (source reads only, nothing filled) is tested in
// reader/clock_test.go, the cache tier's refusal of a fast clock's fill in
// cache/bounded_test.go.
func TestClockOffsetFailsReadiness(t *testing.T) {
	e := newEnv(t)
	good := e.instance(instOpts{ccfg: longSoft})
	fast := e.instance(instOpts{ccfg: longSoft, clockOffset: 2 * time.Second})
	// The guard's first reading may be inconclusive on a loaded box.
	testenv.Eventually(t, 30*time.Second, "the fast clock's process is not ready for its clock offset", func() error {
		if err := fast.srv.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "clock offset") {
			return fmt.Errorf("fast clock: Ready = %v, want a clock offset error", err)
		}
		return nil
	})
	if err := good.srv.Ready(context.Background()); err != nil {
		t.Fatalf("good clock: Ready = %v", err)
	}
}
