package warm

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/internal/telemetry"
)

// Causes of a back-off (the label of tidemark_warm_backoffs_total).
const (
	causeSlow     = "slow_source"
	causeRefusals = "refusals"
)

type metrics struct {
	keys      *prometheus.CounterVec
	remaining prometheus.Gauge
	rate      prometheus.Gauge
	runs      *prometheus.CounterVec
	backoffs  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewInstruments(reg)
	m := &metrics{
		keys: in.CounterVec("tidemark_warm_keys_total",
			"Keys the warmer handled, by result: filled, cached, busy, lost, refused (background budget, retried), error.",
			"result"),
		remaining: in.Gauge("tidemark_warm_remaining_keys",
			"Keys the current warm run has still to handle."),
		rate: in.Gauge("tidemark_warm_rate_keys",
			"Keys per second the warmer allows itself now (0 when idle)."),
		runs: in.CounterVec("tidemark_warm_runs_total",
			"Warm runs by reason: reset_at moved, cache tier identity changed, key count collapsed, requested.",
			"reason"),
		backoffs: in.CounterVec("tidemark_warm_backoffs_total",
			"Times the warmer halved its rate, by cause: slow_source (its source reads slowed), refusals (foreground refusals rose).",
			"cause"),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	for _, r := range []string{string(api.WarmFilled), string(api.WarmCached), string(api.WarmBusy), string(api.WarmLost), "refused", "error"} {
		m.keys.WithLabelValues(r)
	}
	for _, c := range []string{causeSlow, causeRefusals} {
		m.backoffs.WithLabelValues(c)
	}
	for _, r := range []string{ReasonResetAt, ReasonIdentity, ReasonCollapse, ReasonRequested} {
		m.runs.WithLabelValues(r)
	}
	return m, nil
}
