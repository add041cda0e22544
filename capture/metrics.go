package capture

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics is the one metrics set of the capture package (the relay registers
// its own).
type metrics struct {
	events       *prometheus.CounterVec
	transactions prometheus.Counter
	confirmed    prometheus.Gauge
	slotLag      prometheus.Gauge
	walStatus    *prometheus.GaugeVec
	safeWAL      prometheus.Gauge
	resets       *prometheus.CounterVec
	heartbeats   prometheus.Counter
}

// walStatuses are pg_replication_slots.wal_status values; exactly one is 1.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost", "missing"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidemark_capture_events_total", Help: "Change events decoded from committed transactions, by op."}, []string{"op"}),
		transactions: prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_capture_transactions_total", Help: "Committed transactions read from the slot."}),
		confirmed:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_capture_confirmed_lsn", Help: "LSN (bytes) last confirmed to Postgres: everything before it is in Kafka."}),
		slotLag:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_slot_lag_bytes", Help: "WAL retained by the slot: pg_current_wal_lsn() - confirmed_flush_lsn."}),
		walStatus:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tidemark_slot_wal_status", Help: "1 for the slot's current wal_status."}, []string{"status"}),
		safeWAL:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "tidemark_slot_safe_wal_size_bytes", Help: "pg_replication_slots.safe_wal_size (-1 when unlimited)."}),
		resets:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tidemark_capture_resets_total", Help: "Reset markers sent for detected gaps, by reason."}, []string{"reason"}),
		heartbeats:   prometheus.NewCounter(prometheus.CounterOpts{Name: "tidemark_capture_heartbeats_total", Help: "Heartbeats read back from the stream (each sends resolved markers)."}),
	}
	for _, op := range []string{"upsert", "delete", "truncate"} {
		m.events.WithLabelValues(op)
	}
	for _, r := range []string{ReasonSlotMissing, ReasonSlotLost, ReasonSystemIDChanged, ReasonTimelineChanged} {
		m.resets.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.events, m.transactions, m.confirmed, m.slotLag, m.walStatus, m.safeWAL, m.resets, m.heartbeats} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("capture: register metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) setWALStatus(status string) {
	for _, s := range walStatuses {
		v := 0.0
		if s == status {
			v = 1
		}
		m.walStatus.WithLabelValues(s).Set(v)
	}
}
