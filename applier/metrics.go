package applier

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/telemetry"
)

// Record results, the label of tidemark_applier_records_total.
const (
	resultApplied   = string(cache.InvalidateApplied)
	resultDuplicate = string(cache.InvalidateDuplicate)
	resultOlder     = string(cache.InvalidateOlder)
	// resultRevoked: not above the floor, yet a value observed before the
	// change (or a lease) was revoked: a write that did not raise the version.
	resultRevoked = string(cache.InvalidateRevoked)
	resultPurged  = "purged" // the key refused its invalidation and was deleted instead
	resultDLQ     = "dlq"
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
	aheadRefused     prometheus.Counter
	sourceConflicts  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewInstruments(reg)
	m := &metrics{
		records: in.CounterVec("tidemark_applier_records_total",
			"Change records handled by the applier, by result (applied, duplicate, older, purged, dlq).",
			"result"),
		commitToApply: in.Histogram("tidemark_applier_commit_to_apply_seconds",
			"Time from the source commit to the invalidation being in Redis.",
			[]float64{.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}),
		partitionWMAge: in.GaugeVec("tidemark_applier_partition_watermark_age_seconds",
			"Age of the newest watermark this applier wrote for each of its partitions (+Inf before the first).",
			"partition"),
		watermarkAge: in.Gauge(telemetry.WatermarkAgeName, telemetry.WatermarkAgeHelp),
		oldestPendingAge: in.Gauge("tidemark_oldest_pending_event_age_seconds",
			"Age of the oldest record fetched by this applier and not yet applied (0 when none)."),
		lag: in.GaugeVec("tidemark_applier_consumer_lag_records",
			"Records between the partition's high watermark and this applier's applied offset.",
			"partition"),
		failoverRewinds: in.Counter("tidemark_applier_failover_rewinds_total",
			"Cache-tier restarts or failovers after which the applier set reset_at and rewound its partitions."),
		batchSize: in.Histogram("tidemark_applier_batch_records",
			"Invalidations per batched cache-tier call (after dedupe).",
			prometheus.ExponentialBuckets(1, 2, 11)),
		stalled: in.GaugeVec("tidemark_applier_partition_stalled_seconds",
			"How long each partition has been held by a failing Redis call (0 when it is moving).",
			"partition"),
		stalls: in.Counter("tidemark_applier_stalls_total",
			"Times a partition started holding because a Redis call kept failing."),
		gaps: in.CounterVec("tidemark_applier_gaps_total",
			"Partitions found to have lost records in the topic (reset_at set, partition rewound), by reason.",
			"reason"),
		aheadRefused: in.Counter("tidemark_applier_watermarks_refused_total",
			"Resolved markers whose time the cache tier refused as ahead of its clock by more than the clock bound."),
		sourceConflicts: in.Counter("tidemark_applier_source_conflicts_total",
			"Resolved markers refused because another source's reached the same partition within three heartbeats (two deployments' captures on one topic)."),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	for _, r := range []string{resultApplied, resultDuplicate, resultOlder, resultRevoked, resultPurged, resultDLQ} {
		m.records.WithLabelValues(r) // export zeros so rates work from the start
	}
	return m, nil
}

func partLabel(p int32) string { return strconv.FormatInt(int64(p), 10) }
