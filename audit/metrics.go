package audit

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/telemetry"
)

type metrics struct {
	checked      prometheus.Counter
	violations   *prometheus.CounterVec
	repairs      prometheus.Counter
	evictions    *prometheus.CounterVec
	ratio        prometheus.Gauge
	nines        prometheus.Gauge
	leader       prometheus.Gauge
	sweepSeconds prometheus.Gauge
	tenantKeys   *prometheus.GaugeVec
	tenantBytes  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewInstruments(reg)
	m := &metrics{
		checked: in.Counter("tidemark_audit_checked_total",
			"Cached entries the auditor compared with the source."),
		violations: in.CounterVec("tidemark_audit_violations_total",
			"Cached entries found inconsistent with the source, by kind: behind_servable, ahead_of_source, wrong_tenant, content_mismatch.",
			"kind"),
		repairs: in.Counter("tidemark_audit_repairs_total",
			"Behind-and-servable entries whose floor the auditor raised to the source version."),
		evictions: in.CounterVec("tidemark_audit_evictions_total",
			"Cached entries the auditor deleted because the source cannot vouch for them, by kind: ahead_of_source, wrong_tenant, content_mismatch.",
			"kind"),
		ratio: in.Gauge("tidemark_audit_consistency_ratio",
			"Consistent share of the entries checked over the audit window."),
		nines: in.Gauge("tidemark_audit_consistency_nines",
			"The consistency ratio as nines, -log10(violations/checked) over the window; with no violation, log10(checked) (what the sample supports)."),
		leader: in.Gauge("tidemark_audit_leader",
			"1 while this process holds the auditor lease."),
		sweepSeconds: in.Gauge("tidemark_audit_sweep_seconds",
			"Duration of the last complete sweep over every master's entries: the sampling period."),
		tenantKeys: in.GaugeVec("tidemark_audit_tenant_keys",
			"Estimated cached entries per tenant (the 20 largest; the rest as other), from the audit sweep.",
			"tenant"),
		tenantBytes: in.GaugeVec("tidemark_audit_tenant_bytes",
			"Estimated Redis memory of cached entries per tenant (the 20 largest; the rest as other), from the audit sweep.",
			"tenant"),
	}
	if err := in.Err(); err != nil {
		return nil, err
	}
	for _, k := range []string{KindBehindServable, KindAhead, KindWrongTenant, KindContent} {
		m.violations.WithLabelValues(k)
	}
	for _, k := range []string{KindAhead, KindWrongTenant, KindContent} {
		m.evictions.WithLabelValues(k)
	}
	return m, nil
}
