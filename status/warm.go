package status

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/warm"
)

// WarmUp is the elected warmer's last or current run (package warm), as
// it publishes it in the cache tier.
type WarmUp struct {
	State   string    `json:"state"`
	Reason  string    `json:"reason"`
	Tenant  string    `json:"tenant,omitempty"`
	Total   int       `json:"total_keys"`
	Done    int       `json:"done_keys"`
	Filled  int       `json:"filled_keys"`
	Rate    float64   `json:"rate_keys_per_second"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	Line    string    `json:"line"` // the one-line summary `tidemark status` prints
}

// readWarm reads the warm-up progress; nil when no run was ever published.
func readWarm(ctx context.Context, cfg Config) (*WarmUp, error) {
	rdb, err := cfg.openRedis()
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	p, ok, err := warm.ReadProgress(ctx, rdb, cfg.Namespace)
	if err != nil || !ok {
		return nil, err
	}
	return &WarmUp{State: p.State, Reason: p.Reason, Tenant: p.Tenant, Total: p.Total, Done: p.Done, Filled: p.Filled,
		Rate: p.Rate, Started: p.Started.UTC(), Updated: p.Updated.UTC(), Line: p.String()}, nil
}

// Audit is this process's continuous-audit figures (package audit), read
// from its own metrics: only the status page has them.
type Audit struct {
	Checked    float64 `json:"checked"`
	Violations float64 `json:"violations"`
	Nines      float64 `json:"consistency_nines"`
	Leader     bool    `json:"leader"`
}

// String is the page's one-line summary.
func (a Audit) String() string {
	who := "another process audits; "
	if a.Leader {
		who = ""
	}
	return fmt.Sprintf("%s%.0f entries checked here, %.0f violations, %.2f nines of consistency", who, a.Checked, a.Violations, a.Nines)
}

// gatherAudit is nil when the process runs no auditor.
func gatherAudit(g prometheus.Gatherer) *Audit {
	if g == nil {
		return nil
	}
	mfs, _ := g.Gather()
	var a Audit
	found := false
	for _, mf := range mfs {
		sum := 0.0
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		switch mf.GetName() {
		case "tidemark_audit_checked_total":
			a.Checked, found = sum, true
		case "tidemark_audit_violations_total":
			a.Violations = sum
		case "tidemark_audit_consistency_nines":
			a.Nines = sum
		case "tidemark_audit_leader":
			a.Leader = sum > 0
		}
	}
	if !found {
		return nil
	}
	return &a
}
