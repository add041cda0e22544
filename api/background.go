package api

import (
	"context"
	"fmt"
	"time"

	"tidemark/cache"
)

// This file is the API's surface for background work that runs beside it in
// a serve process (the warmer and the auditor, packages warm and audit): they
// share the source budget's background class with stale refreshes, so that
// all background reads together stay within it.

// ErrBudget is matched (errors.Is) by every refusal of the source budget.
var ErrBudget = errBudget

// WarmResult says what Warm did for one key.
type WarmResult string

const (
	WarmFilled WarmResult = "filled" // read from the source under the background class and cached
	WarmCached WarmResult = "cached" // already cached (fresh, or not-found): nothing read
	WarmBusy   WarmResult = "busy"   // another reader holds the key's lease: it fills
	WarmLost   WarmResult = "lost"   // read, but the fill was refused (an invalidation overtook it)
)

// WarmOutcome is one Warm call's result and, when it read the source, how
// long the read took.
type WarmOutcome struct {
	Result WarmResult
	Source time.Duration
}

// Warm fills (tenant, item) through the normal lease and fill path when the
// cache has no usable value, reading the source under the background class.
// A budget refusal is an error matching ErrBudget (the key's fill lease is
// given back); the caller backs off and asks again.
func (s *Server) Warm(ctx context.Context, tenant, item string) (WarmOutcome, error) {
	lr, err := s.cache.Lookup(ctx, tenant, item, 0)
	if err != nil {
		return WarmOutcome{}, fmt.Errorf("api: warm %s/%s: %w", tenant, item, err)
	}
	switch {
	case lr.Status == cache.StatusHit || lr.Status == cache.StatusNotFound:
		return WarmOutcome{Result: WarmCached}, nil
	case lr.Token.IsZero():
		return WarmOutcome{Result: WarmBusy}, nil
	}
	start := time.Now()
	it, obs, err := s.sourceRead(ctx, classBackground, tenant, item)
	if err != nil {
		// Give the lease back: held, it would turn the caller's retry after a
		// refusal (or the next warmer's read) into WarmBusy, and the key
		// would stay cold until the lease expired.
		s.releaseLease(ctx, tenant, item, lr.Token)
		return WarmOutcome{}, fmt.Errorf("api: warm %s/%s: %w", tenant, item, err)
	}
	out := WarmOutcome{Result: WarmLost, Source: time.Since(start)}
	if s.fill(ctx, tenant, item, lr.Token, it, obs, false) { // hot keys: no admission
		out.Result = WarmFilled
	}
	return out, nil
}

// auditTenant is the background class's fair-share name for reads that
// belong to no one tenant (the auditor's batched reads). A NUL cannot start a
// tenant ID, so it never shares a real tenant's share.
const auditTenant = "\x00audit"

// AcquireBackground spends n reads of the background class for a caller that
// reads the source itself in one statement (the auditor): one admission of
// cost n (more than a full bucket holds only in parts of what it holds). It
// waits while the budget refuses, until ctx ends.
func (s *Server) AcquireBackground(ctx context.Context, n int) error {
	for n > 0 {
		cost := min(n, s.budget.maxCost(classBackground))
		release, err := s.budget.acquireWait(ctx, classBackground, auditTenant, cost)
		if err != nil {
			return fmt.Errorf("api: background budget: %w", err)
		}
		release()
		n -= cost
	}
	return nil
}

// BackgroundReadsAtOnce is the most reads one background admission covers
// (what the class's full bucket, and the total's less the class's reserve,
// hold): a caller that reads the source in batches reads at most this many
// rows per statement, so the source never sees more at once than the
// budget admitted at once.
func (s *Server) BackgroundReadsAtOnce() int { return s.budget.maxCost(classBackground) }

// ForegroundRefusals is how many request-path source reads the budget has
// refused so far in this process; a background task backs off while it
// rises.
func (s *Server) ForegroundRefusals() float64 { return float64(s.budget.fgRefused.Load()) }
