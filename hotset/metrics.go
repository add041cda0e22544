package hotset

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/telemetry"
)

type metrics struct {
	merges         *prometheus.CounterVec
	trackedKeys    prometheus.Gauge
	sharedKeys     prometheus.Gauge
	tenantsDropped prometheus.Counter
	fastPublishes  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewInstruments(reg)
	m := &metrics{
		merges: in.CounterVec("tidemark_hotset_merges_total",
			"Merges of this process's read counts into the shared hot set, by result: ok, error.",
			"result"),
		trackedKeys: in.Gauge("tidemark_hotset_tracked_keys",
			"Keys counted by this process's heavy-hitters sketch (bounded by tenants x counters per tenant)."),
		sharedKeys: in.Gauge("tidemark_hotset_shared_keys",
			"Members of the namespace's shared hot set after the last merge."),
		tenantsDropped: in.Counter("tidemark_hotset_tenants_dropped_total",
			"Tenants forgotten by the sketch to make room for another (the one with the fewest decayed reads)."),
		fastPublishes: in.CounterVec("tidemark_hotset_fast_publishes_total",
			"Publishes of this process's fastest keys (the fast estimate hot-key replicas read), by result: ok, error.",
			"result"),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	m.merges.WithLabelValues("ok")
	m.merges.WithLabelValues("error")
	m.fastPublishes.WithLabelValues("ok")
	m.fastPublishes.WithLabelValues("error")
	return m, nil
}
