package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/reader"
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

// A process is not ready before its namespace's identity is claimed, nor
// after its claim was refused (a reader of another table): otherwise
// /readyz could send it visitors a moment before the refusal stops Serve.
func TestReadinessWaitsForTheIdentityClaim(t *testing.T) {
	e := newEnv(t)
	first := e.instance(instOpts{ccfg: longSoft, unclaimed: true, uncounted: true})
	if err := first.srv.Ready(context.Background()); !errors.Is(err, reader.ErrNotClaimed) {
		t.Fatalf("before the claim: Ready = %v, want not ready, not claimed", err)
	}
	if err := first.srv.rd.Claim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := first.srv.rd.Join(context.Background()); err != nil { // registered on the source, as Serve does
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the claimed process is ready", func() error { return first.srv.Ready(context.Background()) })
	other := e.instance(instOpts{ccfg: longSoft, unclaimed: true, uncounted: true, cfg: func(c *Config) { c.Table.Name = "shop.offers" }})
	if err := other.srv.rd.Claim(context.Background()); !errors.Is(err, cache.ErrIdentity) {
		t.Fatalf("a reader of another table: Claim = %v, want refused", err)
	}
	if err := other.srv.Ready(context.Background()); !errors.Is(err, cache.ErrIdentity) {
		t.Fatalf("after the refusal: Ready = %v, want the refusal", err)
	}
}
