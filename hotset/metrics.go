package hotset

import (
	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/telemetry"
)

type metrics struct {
	merges         *prometheus.CounterVec
	trackedKeys    prometheus.Gauge
	sharedKeys     prometheus.Gauge
	tenantsDropped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		merges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_hotset_merges_total",
			Help: "Merges of this process's read counts into the shared hot set, by result: ok, error.",
		}, []string{"result"}),
		trackedKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_hotset_tracked_keys",
			Help: "Keys counted by this process's heavy-hitters sketch (bounded by tenants x counters per tenant).",
		}),
		sharedKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_hotset_shared_keys",
			Help: "Members of the namespace's shared hot set after the last merge.",
		}),
		tenantsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_hotset_tenants_dropped_total",
			Help: "Tenants forgotten by the sketch to make room for another (the one with the fewest decayed reads).",
		}),
	}
	if reg != nil {
		var err error
		m.merges = telemetry.Register(reg, m.merges, &err)
		m.trackedKeys = telemetry.Register(reg, m.trackedKeys, &err)
		m.sharedKeys = telemetry.Register(reg, m.sharedKeys, &err)
		m.tenantsDropped = telemetry.Register(reg, m.tenantsDropped, &err)
		if err != nil {
			return nil, err
		}
	}
	m.merges.WithLabelValues("ok")
	m.merges.WithLabelValues("error")
	return m, nil
}
