package cache

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/telemetry"
)

// metrics are the cache tier's Prometheus series. Registering on a registry
// that already holds them (API and applier in one process) shares them.
type metrics struct {
	lookups       *prometheus.CounterVec
	lookupsBy     map[Status]prometheus.Counter // lookups' children, resolved once ("error" too): every lookup counts one
	fillRejected  *prometheus.CounterVec
	invalidations *prometheus.CounterVec
	watermarkAge  prometheus.Gauge
	wAge          prometheus.Gauge // telemetry.WatermarkAgeName, the name the alerts read
	wmRepairs     prometheus.Counter
	wmForeign     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewInstruments(reg)
	m := &metrics{
		lookups: in.CounterVec("tidemark_cache_lookups_total",
			"Cache lookups by result: hit, stale, miss, wait, not_found, error.",
			"result"),
		fillRejected: in.CounterVec("tidemark_cache_fill_rejected_total",
			"Fills the cache refused, by reason: token, version, expired, clock, lifetime.",
			"reason"),
		invalidations: in.CounterVec("tidemark_cache_invalidations_total",
			"Invalidations by result: applied, duplicate, older, error.",
			"result"),
		watermarkAge: in.Gauge("tidemark_cache_watermark_age_seconds",
			"Age of the freshness watermark W as last polled by this process; +Inf while W is unknown (or ahead of the cache tier's clock)."),
		wAge: in.Gauge(telemetry.WatermarkAgeName, telemetry.WatermarkAgeHelp),
		wmRepairs: in.Counter("tidemark_cache_watermark_repairs_total",
			"Partition watermarks deleted because they were ahead of the cache tier's clock by more than the clock bound."),
		wmForeign: in.Gauge("tidemark_cache_watermark_foreign_partitions",
			"Partitions whose watermark, as last polled, was set by resolved markers of another source than this process's (two deployments on one topic): W is unknown while any is (serve only)."),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	// Every label value exists from the start, so rates work from zero.
	m.lookupsBy = map[Status]prometheus.Counter{}
	for _, s := range []Status{StatusHit, StatusStale, StatusMiss, StatusWait, StatusNotFound, "error"} {
		m.lookupsBy[s] = m.lookups.WithLabelValues(string(s))
	}
	for _, r := range []Reason{ReasonToken, ReasonVersion, ReasonExpired, ReasonClock, ReasonLifetime} {
		m.fillRejected.WithLabelValues(string(r))
	}
	for _, r := range []InvalidateResult{InvalidateApplied, InvalidateDuplicate, InvalidateOlder, InvalidateRevoked, "error"} {
		m.invalidations.WithLabelValues(string(r))
	}
	return m, nil
}

// lookup is the counter of lookups that ended in s.
func (m *metrics) lookup(s Status) prometheus.Counter {
	if c, ok := m.lookupsBy[s]; ok {
		return c
	}
	return m.lookups.WithLabelValues(string(s))
}
