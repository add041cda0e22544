package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/telemetry"
)

// metrics is the api package's one metrics set, registered on the injected
// Registerer.
type metrics struct {
	requests         *prometheus.CounterVec   // route, code
	requestSeconds   *prometheus.HistogramVec // route
	sourceReads      *prometheus.CounterVec   // class, result
	budgetRejections *prometheus.CounterVec   // class
	l1Hits           prometheus.Counter
	deadlineRefusals prometheus.Counter
	fillsSkipped     *prometheus.CounterVec // reason
	fillRate         prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewExclusiveInstruments(reg)
	m := &metrics{
		requests: in.CounterVec("tidemark_api_requests_total",
			"API requests by route and HTTP status code.",
			"route", "code"),
		requestSeconds: in.HistogramVec("tidemark_api_request_seconds",
			"API request latency by route.",
			[]float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
			"route"),
		sourceReads: in.CounterVec("tidemark_api_source_reads_total",
			"Item reads sent to Postgres by budget class (foreground, background, read_your_writes) and result (found, not_found, timeout, error).",
			"class", "result"),
		budgetRejections: in.CounterVec("tidemark_api_budget_rejections_total",
			"Source reads refused by the shared rate budget or the in-flight cap, by class.",
			"class"),
		l1Hits: in.Counter("tidemark_api_l1_hits_total",
			"GETs answered from the in-process hot-key L1."),
		deadlineRefusals: in.Counter("tidemark_api_deadline_refusals_total",
			"Answers found past their hard deadline by the check right before the body is written (then read fresh or 503)."),
		fillsSkipped: in.CounterVec("tidemark_api_fills_skipped_total",
			"Source reads under a fill lease answered but not cached (the lease released), by reason (too_large, admission).",
			"reason"),
		fillRate: in.Gauge("tidemark_api_fill_rate",
			"Fills/s of new keys this process shares among its tenants: the fill rate, or less when sized to the cache (0: admission off)."),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	m.fillsSkipped.WithLabelValues(skipTooLarge)
	m.fillsSkipped.WithLabelValues(skipAdmission)
	for _, class := range []string{classForeground, classBackground, classReadYourWrites} {
		m.budgetRejections.WithLabelValues(class)
		for _, result := range []string{"found", "not_found", "timeout", "error"} {
			m.sourceReads.WithLabelValues(class, result)
		}
	}
	return m, nil
}
