package audit

import (
	"github.com/prometheus/client_golang/prometheus"

	"tidemark/internal/telemetry"
)

type metrics struct {
	checked      prometheus.Counter
	violations   *prometheus.CounterVec
	repairs      prometheus.Counter
	ratio        prometheus.Gauge
	nines        prometheus.Gauge
	leader       prometheus.Gauge
	sweepSeconds prometheus.Gauge
	tenantKeys   *prometheus.GaugeVec
	tenantBytes  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		checked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_audit_checked_total",
			Help: "Cached entries the auditor compared with the source.",
		}),
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidemark_audit_violations_total",
			Help: "Cached entries found inconsistent with the source, by kind: behind_servable, ahead_of_source, wrong_tenant.",
		}, []string{"kind"}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_audit_repairs_total",
			Help: "Behind-and-servable entries whose floor the auditor raised to the source version.",
		}),
		ratio: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_audit_consistency_ratio",
			Help: "Consistent share of the entries checked over the audit window.",
		}),
		nines: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_audit_consistency_nines",
			Help: "The consistency ratio as nines, -log10(violations/checked) over the window; with no violation, log10(checked) (what the sample supports).",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_audit_leader",
			Help: "1 while this process holds the auditor lease.",
		}),
		sweepSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidemark_audit_sweep_seconds",
			Help: "Duration of the last complete sweep over every master's entries: the sampling period.",
		}),
		tenantKeys: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_audit_tenant_keys",
			Help: "Estimated cached entries per tenant (the 20 largest; the rest as other), from the audit sweep.",
		}, []string{"tenant"}),
		tenantBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tidemark_audit_tenant_bytes",
			Help: "Estimated Redis memory of cached entries per tenant (the 20 largest; the rest as other), from the audit sweep.",
		}, []string{"tenant"}),
	}
	if reg != nil {
		var err error
		m.checked = telemetry.Register(reg, m.checked, &err)
		m.violations = telemetry.Register(reg, m.violations, &err)
		m.repairs = telemetry.Register(reg, m.repairs, &err)
		m.ratio = telemetry.Register(reg, m.ratio, &err)
		m.nines = telemetry.Register(reg, m.nines, &err)
		m.leader = telemetry.Register(reg, m.leader, &err)
		m.sweepSeconds = telemetry.Register(reg, m.sweepSeconds, &err)
		m.tenantKeys = telemetry.Register(reg, m.tenantKeys, &err)
		m.tenantBytes = telemetry.Register(reg, m.tenantBytes, &err)
		if err != nil {
			return nil, err
		}
	}
	for _, k := range []string{KindBehindServable, KindAhead, KindWrongTenant} {
		m.violations.WithLabelValues(k)
	}
	return m, nil
}
