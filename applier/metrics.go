package applier

import (
	"errors"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"tidemark/cache"
)

// Record results, the label of tidemark_applier_records_total.
const (
	resultApplied   = string(cache.InvalidateApplied)
	resultDuplicate = string(cache.InvalidateDuplicate)
	resultOlder     = string(cache.InvalidateOlder)
	resultDLQ       = "dlq"
)

// metrics is the applier's one set of instruments.
type metrics struct {
	records          *prometheus.CounterVec
	commitToApply    prometheus.Histogram
	partitionWMAge   *prometheus.GaugeVec
	watermarkAge     prometheus.Gauge
	oldestPendingAge prometheus.Gauge
	lag              *prometheus.GaugeVec
	failoverRewinds  prometheus.Counter
	batchSize        prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_applier_records_total",
			Help: "Change records handled by the applier, by result (applied, duplicate, older, dlq).",
		}, []string{"result"}),
		commitToApply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidemark_applier_commit_to_apply_seconds",
			Help:    "Time from the source commit to the invalidation being in Redis.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		partitionWMAge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_applier_partition_watermark_age_seconds",
			Help: "Age of the newest watermark this applier wrote for each of its partitions (+Inf before the first).",
		}, []string{"partition"}),
		watermarkAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_watermark_age_seconds",
			Help: "Age of the global watermark W (min over partitions): the bound on the oldest pending event age (+Inf when unknown).",
		}),
		oldestPendingAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_oldest_pending_event_age_seconds",
			Help: "Age of the oldest record fetched by this applier and not yet applied (0 when none).",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_applier_consumer_lag_records",
			Help: "Records between the partition's high watermark and this applier's applied offset.",
		}, []string{"partition"}),
		failoverRewinds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_applier_failover_rewinds_total",
			Help: "Cache-tier restarts or failovers after which the applier set reset_at and rewound its partitions.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidemark_applier_batch_size",
			Help:    "Invalidations per batched cache-tier call (after dedupe).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
	}
	var err error
	m.records = register(reg, m.records, &err)
	m.commitToApply = register(reg, m.commitToApply, &err)
	m.partitionWMAge = register(reg, m.partitionWMAge, &err)
	m.watermarkAge = register(reg, m.watermarkAge, &err)
	m.oldestPendingAge = register(reg, m.oldestPendingAge, &err)
	m.lag = register(reg, m.lag, &err)
	m.failoverRewinds = register(reg, m.failoverRewinds, &err)
	m.batchSize = register(reg, m.batchSize, &err)
	if err != nil {
		return nil, err
	}
	for _, r := range []string{resultApplied, resultDuplicate, resultOlder, resultDLQ} {
		m.records.WithLabelValues(r) // export zeros so rates work from the start
	}
	return m, nil
}

// register registers c, or reuses the collector already registered under
// the same name (a replay and an applier may share one registry).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	*errp = errors.Join(*errp, err)
	return c
}

func partLabel(p int32) string { return strconv.FormatInt(int64(p), 10) }
