// Package audit is the continuous consistency auditor: one elected instance
// per namespace (inside a serve process) walks every master's cached entries
// with SCAN at a configured rate, charged to the source budget's background
// class, compares each with its Postgres row (the judgement of package
// inspect), and exports what it found. An entry that is behind its source
// and would still be served is repaired at once by raising its floor to the
// source version, the same write an invalidation makes, and logged with the
// evidence.
package audit

import (
	"context"
	"time"

	"github.com/tidemark/tidemark/catalog"
	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
)

// Config of the auditor.
type Config struct {
	Namespace string
	Table     catalog.Table // the catalog table mapping
	Rate      float64       // entries checked per second, across all masters
	Batch     int           // entries per round (one SCAN page, one source query)
	Grace     time.Duration // an entry behind by less than this is the pipeline still delivering, not a violation
	SLO       time.Duration // freshness SLO, for the findings' SLO flag
	Window    time.Duration // the consistency ratio covers this long
	LeaseTTL  time.Duration // election lease: a crashed auditor is replaced after this
}

// DefaultConfig checks 200 entries/s in rounds of 50 and lets the pipeline 5 s
// (its end-to-end lag is well under a second when healthy) before a behind
// entry counts.
func DefaultConfig() Config {
	return Config{Namespace: promise.Namespace, Table: catalog.DefaultTable(), Rate: 200, Batch: 50, Grace: 5 * time.Second,
		SLO: promise.Bound, Window: 10 * time.Minute, LeaseTTL: 5 * time.Second}
}

// Validate reports every problem at once, one config.FieldError per field.
func (c Config) Validate() error {
	var p config.Problems
	if c.Namespace == "" {
		p.Add("Namespace", "must not be empty")
	}
	p.Nested("Table", c.Table.Validate())
	if !(c.Rate > 0) {
		p.Add("Rate", "must be positive (got %v)", c.Rate)
	}
	if c.Batch < 1 {
		p.Add("Batch", "must be at least 1 (got %d)", c.Batch)
	}
	p.Positive("Grace", c.Grace)
	p.Positive("SLO", c.SLO)
	p.Positive("Window", c.Window)
	p.Positive("LeaseTTL", c.LeaseTTL)
	return p.Err()
}

// Budget is the source budget's background class (api.Server).
type Budget interface {
	AcquireBackground(ctx context.Context, n int) error
	// BackgroundReadsAtOnce is the most reads one admission covers: the
	// rows of one source statement.
	BackgroundReadsAtOnce() int
}
