package api

import (
	"context"

	"github.com/tidemark/tidemark/reader"
)

// This file is the API's surface for background work that runs beside it in
// a serve process (the warmer and the auditor, packages warm and audit): the
// read path's (package reader), so that they share the source budget's
// background class with stale refreshes.

// ErrBudget is matched (errors.Is) by every refusal of the source budget.
var ErrBudget = reader.ErrBudget

// WarmResult says what Warm did for one key (reader.WarmResult).
type WarmResult = reader.WarmResult

const (
	WarmFilled = reader.WarmFilled
	WarmCached = reader.WarmCached
	WarmBusy   = reader.WarmBusy
	WarmLost   = reader.WarmLost
)

// WarmOutcome is one Warm call's result (reader.WarmOutcome).
type WarmOutcome = reader.WarmOutcome

// Warm fills (tenant, item) through the read path's lease and fill
// (reader.Reader.Warm).
func (s *Server) Warm(ctx context.Context, tenant, item string) (WarmOutcome, error) {
	return s.rd.Warm(ctx, tenant, item)
}

// AcquireBackground spends n reads of the background class for a caller
// that reads the source itself (reader.Reader.AcquireBackground).
func (s *Server) AcquireBackground(ctx context.Context, n int) error {
	return s.rd.AcquireBackground(ctx, n)
}

// BackgroundReadsAtOnce is the most reads one background admission covers
// (what the class's full bucket, and the total's less the class's reserve,
// hold): a caller that reads the source in batches reads at most this many
// rows per statement, so the source never sees more at once than the
// budget admitted at once.
func (s *Server) BackgroundReadsAtOnce() int { return s.rd.MaxCost(reader.ClassBackground) }

// ForegroundRefusals is how many request-path source reads the budget has
// refused so far in this process (reader.Reader.ForegroundRefusals).
func (s *Server) ForegroundRefusals() float64 { return s.rd.ForegroundRefusals() }
