package replica

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/telemetry"
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
	in := telemetry.NewInstruments(reg)
	m := &metrics{
		hotKeys: in.Gauge("tidemark_replica_hot_keys",
			"Hot keys with a published replica set, as of this process's last builder pass."),
		switches: in.Counter("tidemark_replica_manifest_switches_total",
			"Verified replica sets this process published (manifest switches)."),
		buildErrors: in.Counter("tidemark_replica_build_failures_total",
			"Replica set builds that published nothing (the value moved on, a copy was refused, or Redis failed)."),
		reads: in.CounterVec("tidemark_replica_reads_total",
			"Reads of a key with a held manifest, by result: copy (served from a replica), fallback (read the primary).",
			"result"),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	m.reads.WithLabelValues("copy") // both series exist from the start, so a rate of them is defined
	m.reads.WithLabelValues("fallback")
	return m, nil
}
