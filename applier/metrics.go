package applier

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"tidemark/cache"
	"tidemark/internal/telemetry"
)

// Record results, the label of tidemark_applier_records_total.
const (
	resultApplied   = string(cache.InvalidateApplied)
	resultDuplicate = string(cache.InvalidateDuplicate)
	resultOlder     = string(cache.InvalidateOlder)
	resultPurged    = "purged" // the key refused its invalidation and was deleted instead
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
	stalled          *prometheus.GaugeVec
	stalls           prometheus.Counter
	gaps             *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_applier_records_total",
			Help: "Change records handled by the applier, by result (applied, duplicate, older, purged, dlq).",
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
		stalled: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_applier_partition_stalled_seconds",
			Help: "How long each partition has been held by a failing Redis call (0 when it is moving).",
		}, []string{"partition"}),
		stalls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_applier_stalls_total",
			Help: "Times a partition started holding because a Redis call kept failing.",
		}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_applier_gaps_total",
			Help: "Partitions found to have lost records in the topic (reset_at set, partition rewound), by reason.",
		}, []string{"reason"}),
	}
	var err error
	m.records = telemetry.Register(reg, m.records, &err)
	m.commitToApply = telemetry.Register(reg, m.commitToApply, &err)
	m.partitionWMAge = telemetry.Register(reg, m.partitionWMAge, &err)
	m.watermarkAge = telemetry.Register(reg, m.watermarkAge, &err)
	m.oldestPendingAge = telemetry.Register(reg, m.oldestPendingAge, &err)
	m.lag = telemetry.Register(reg, m.lag, &err)
	m.failoverRewinds = telemetry.Register(reg, m.failoverRewinds, &err)
	m.batchSize = telemetry.Register(reg, m.batchSize, &err)
	m.stalled = telemetry.Register(reg, m.stalled, &err)
	m.stalls = telemetry.Register(reg, m.stalls, &err)
	m.gaps = telemetry.Register(reg, m.gaps, &err)
	if err != nil {
		return nil, err
	}
	for _, r := range []string{resultApplied, resultDuplicate, resultOlder, resultPurged, resultDLQ} {
		m.records.WithLabelValues(r) // export zeros so rates work from the start
	}
	return m, nil
}

func partLabel(p int32) string { return strconv.FormatInt(int64(p), 10) }
