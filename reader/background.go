package reader

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// This file is the Reader's surface for background work that runs beside it
// (the warmer and the auditor, packages warm and audit) and for callers that
// read the source themselves: they share the source budget's classes with
// the Reader's own reads, so that all reads together stay within it.

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
func (rd *Reader) Warm(ctx context.Context, tenant, item string) (WarmOutcome, error) {
	ctx = cache.Background(ctx) // the warmer's lookup is not a visitor's demand
	lr, err := rd.cache.Lookup(ctx, tenant, item, 0)
	if err != nil {
		return WarmOutcome{}, fmt.Errorf("reader: warm %s/%s: %w", tenant, item, err)
	}
	switch {
	case lr.Status == cache.StatusHit || lr.Status == cache.StatusNotFound:
		return WarmOutcome{Result: WarmCached}, nil
	case lr.Token.IsZero():
		return WarmOutcome{Result: WarmBusy}, nil
	}
	start := time.Now()
	it, obs, err := rd.sourceRead(ctx, ClassBackground, tenant, item)
	if err != nil {
		// Give the lease back: held, it would turn the caller's retry after a
		// refusal (or the next warmer's read) into WarmBusy, and the key
		// would stay cold until the lease expired.
		rd.releaseLease(ctx, tenant, item, lr.Token)
		return WarmOutcome{}, fmt.Errorf("reader: warm %s/%s: %w", tenant, item, err)
	}
	out := WarmOutcome{Result: WarmLost, Source: time.Since(start)}
	if rd.fill(ctx, tenant, item, lr.Token, it, obs, false) { // hot keys: no admission
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
func (rd *Reader) AcquireBackground(ctx context.Context, n int) error {
	for n > 0 {
		cost := min(n, rd.budget.maxCost(ClassBackground))
		release, err := rd.budget.acquireWait(ctx, ClassBackground, auditTenant, cost)
		if err != nil {
			return fmt.Errorf("reader: background budget: %w", err)
		}
		release()
		n -= cost
	}
	return nil
}

// ForegroundRefusals is how many request-path source reads the budget has
// refused so far in this process; a background task backs off while it
// rises.
func (rd *Reader) ForegroundRefusals() float64 { return float64(rd.budget.fgRefused.Load()) }

// Acquire admits one source read of class for tenant that the caller makes
// itself (a list read), or returns an error matching ErrBudget (with a
// RetryAfter, *BudgetError). The caller calls release when the read is done.
func (rd *Reader) Acquire(ctx context.Context, class, tenant string) (release func(), err error) {
	return rd.budget.acquire(ctx, class, tenant)
}

// MaxCost is the most reads of class one admission may ask for (what its
// full buckets hold): AcquireBackground admits n reads in ceil(n/MaxCost)
// admissions.
func (rd *Reader) MaxCost(class string) int { return rd.budget.maxCost(class) }

// AcquireWait is Acquire of cost reads at once for a caller that waits
// rather than fails: while the budget refuses it sleeps the refusal's
// RetryAfter and asks again, until it admits or ctx ends.
func (rd *Reader) AcquireWait(ctx context.Context, class, tenant string, cost int) (release func(), err error) {
	return rd.budget.acquireWait(ctx, class, tenant, cost)
}

// FillInBackground fills a lease the caller got from its own cache lookup
// with a read of the source under the background class (newKey: admission
// applies, as to any miss); a refused or failed read gives the lease back.
func (rd *Reader) FillInBackground(tenant, item string, tok cache.Token, newKey bool) {
	if !newKey {
		rd.refreshInBackground(tenant, item, tok)
		return
	}
	rd.bg.Add(1)
	go func() {
		defer rd.bg.Done()
		ctx, cancel := context.WithTimeout(rd.base, rd.cfg.SourceTimeout+time.Second)
		defer cancel()
		it, obs, err := rd.sourceRead(ctx, ClassBackground, tenant, item)
		if err != nil {
			// Give the lease back: the key's readers must not wait for a
			// fill that will not come.
			rd.releaseLease(ctx, tenant, item, tok)
			return
		}
		rd.fill(ctx, tenant, item, tok, it, obs, true)
	}()
}
