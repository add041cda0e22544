package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/telemetry"
)

// metrics is the api package's one metrics set, registered on the injected
// Registerer (the read path's own, tidemark_api_source_reads_total and the
// others, are package reader's under the stage name "api").
type metrics struct {
	requests       *prometheus.CounterVec   // route, code
	requestSeconds *prometheus.HistogramVec // route
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
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
