package api

import (
	"github.com/prometheus/client_golang/prometheus"
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
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_api_requests_total",
			Help: "API requests by route and HTTP status code.",
		}, []string{"route", "code"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tidemark_api_request_seconds",
			Help:    "API request latency by route.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
		sourceReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_api_source_reads_total",
			Help: "Item reads sent to Postgres by budget class (foreground, background, read_your_writes) and result (found, not_found, timeout, error).",
		}, []string{"class", "result"}),
		budgetRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_api_budget_rejections_total",
			Help: "Source reads refused by the shared rate budget or the in-flight cap, by class.",
		}, []string{"class"}),
		l1Hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_api_l1_hits_total",
			Help: "GETs answered from the in-process hot-key L1.",
		}),
		deadlineRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_api_deadline_refusals_total",
			Help: "Answers found past their hard deadline by the check right before the body is written (then read fresh or 503).",
		}),
		fillsSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_api_fills_skipped_total",
			Help: "Source reads under a fill lease answered but not cached (the lease released), by reason (too_large, admission).",
		}, []string{"reason"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.requestSeconds, m.sourceReads, m.budgetRejections, m.l1Hits, m.deadlineRefusals, m.fillsSkipped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
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
