package replica

import (
	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/telemetry"
)

// metrics are the hot-key replica series; the Builder and the Reader of one
// process share them.
type metrics struct {
	hotKeys     prometheus.Gauge
	switches    prometheus.Counter
	buildErrors prometheus.Counter
	reads       *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		hotKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_replica_hot_keys",
			Help: "Hot keys with a published replica set, as of this process's last builder pass.",
		}),
		switches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_replica_manifest_switches_total",
			Help: "Verified replica sets this process published (manifest switches).",
		}),
		buildErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_replica_build_failures_total",
			Help: "Replica set builds that published nothing (the value moved on, a copy was refused, or Redis failed).",
		}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_replica_reads_total",
			Help: "Reads of a key with a held manifest, by result: copy (served from a replica), fallback (read the primary).",
		}, []string{"result"}),
	}
	if reg != nil {
		var err error
		m.hotKeys = telemetry.Register(reg, m.hotKeys, &err)
		m.switches = telemetry.Register(reg, m.switches, &err)
		m.buildErrors = telemetry.Register(reg, m.buildErrors, &err)
		m.reads = telemetry.Register(reg, m.reads, &err)
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}
