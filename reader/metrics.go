package reader

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/telemetry"
)

// metrics is the reader package's one metrics set, registered on the
// injected Registerer under the caller's stage name (tidemark_api_… in
// `tidemark serve`).
type metrics struct {
	sourceReads      *prometheus.CounterVec // class, result
	budgetRejections *prometheus.CounterVec // class
	l1Hits           prometheus.Counter
	deadlineRefusals prometheus.Counter
	fillsSkipped     *prometheus.CounterVec // reason
	fillRate         prometheus.Gauge
	presenceErrors   prometheus.Counter
	presenceRewinds  prometheus.Counter
	sourceErrors     prometheus.Counter
	sourceShares     prometheus.Gauge
	budgetRate       *prometheus.GaugeVec // class, or "total"
}

func newMetrics(reg prometheus.Registerer, stage string) (*metrics, error) {
	in := telemetry.NewExclusiveInstruments(reg)
	name := func(noun string) string { return "tidemark_" + stage + "_" + noun }
	m := &metrics{
		sourceReads: in.CounterVec(name("source_reads_total"),
			"Item reads sent to the source by budget class (foreground, background, read_your_writes) and result (found, not_found, timeout, error).",
			"class", "result"),
		budgetRejections: in.CounterVec(name("budget_rejections_total"),
			"Source reads refused by the shared rate budget or the in-flight cap, by class.",
			"class"),
		l1Hits: in.Counter(name("l1_hits_total"),
			"Reads answered from the in-process hot-key L1."),
		deadlineRefusals: in.Counter(name("deadline_refusals_total"),
			"Answers found past their hard deadline by the check right before the answer (then read fresh or unavailable)."),
		fillsSkipped: in.CounterVec(name("fills_skipped_total"),
			"Source reads under a fill lease answered but not cached (the lease released), by reason (too_large, admission).",
			"reason"),
		fillRate: in.Gauge(name("fill_rate"),
			"Fills/s of new keys this process shares among its tenants: the fill rate, or less when sized to the cache (0: admission off)."),
		budgetRate: in.GaugeVec(name("budget_rate"),
			"Source reads/s this process admits at, by class and in total: the lowest of each setting among the live serve processes of its source pool (a process configured higher is held to it; the log says when they differ).",
			"class"),
		sourceErrors: in.Counter(name("source_registration_errors_total"),
			"Failed registrations of this process on its source (tidemark.source_readers); once its registration is stale it admits no source reads."),
		sourceShares: in.Gauge(name("source_shares"),
			"Sets of source-budget buckets (a source pool in one Redis) with live serve processes on this process's source: each admits an even share of the lowest budget (1 when one pool in one Redis reads it)."),
		presenceErrors: in.Counter(name("presence_errors_total"),
			"Failed beats of this process's presence in its source pool (while they fail it does not admit source reads locally when Redis is unreachable)."),
		presenceRewinds: in.Counter(name("presence_rewinds_total"),
			"Times this process found its source pool's presence lost or rewound in Redis (restarted empty, restored from a snapshot, failed over to a lagging replica) and wrote back the members it last saw."),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	m.fillsSkipped.WithLabelValues(skipTooLarge)
	m.fillsSkipped.WithLabelValues(skipAdmission)
	for _, class := range []string{ClassForeground, ClassBackground, ClassReadYourWrites} {
		m.budgetRejections.WithLabelValues(class)
		for _, result := range []string{"found", "not_found", "timeout", "error"} {
			m.sourceReads.WithLabelValues(class, result)
		}
	}
	return m, nil
}
