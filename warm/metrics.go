package warm

import (
	"github.com/prometheus/client_golang/prometheus"

	"tidemark/api"
	"tidemark/internal/telemetry"
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
	m := &metrics{
		keys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_warm_keys_total",
			Help: "Keys the warmer handled, by result: filled, cached, busy, lost, refused (background budget, retried), error.",
		}, []string{"result"}),
		remaining: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_warm_remaining_keys",
			Help: "Keys the current warm run has still to handle.",
		}),
		rate: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_warm_rate_keys",
			Help: "Keys per second the warmer allows itself now (0 when idle).",
		}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_warm_runs_total",
			Help: "Warm runs by reason: reset_at moved, cache tier identity changed, key count collapsed, requested.",
		}, []string{"reason"}),
		backoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_warm_backoffs_total",
			Help: "Times the warmer halved its rate, by cause: slow_source (its source reads slowed), refusals (foreground refusals rose).",
		}, []string{"cause"}),
	}
	if reg != nil {
		var err error
		m.keys = telemetry.Register(reg, m.keys, &err)
		m.remaining = telemetry.Register(reg, m.remaining, &err)
		m.rate = telemetry.Register(reg, m.rate, &err)
		m.runs = telemetry.Register(reg, m.runs, &err)
		m.backoffs = telemetry.Register(reg, m.backoffs, &err)
		if err != nil {
			return nil, err
		}
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
