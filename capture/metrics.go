package capture

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/internal/telemetry"
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
	beatSkipped  prometheus.Counter
	invisible    prometheus.Counter
	checks       prometheus.Counter
	active       prometheus.Gauge
	undecodable  *prometheus.CounterVec
}

// walStatuses are pg_replication_slots.wal_status values; exactly one is 1.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost", "missing"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	in := telemetry.NewExclusiveInstruments(reg)
	m := &metrics{
		events:       in.CounterVec("tidemark_capture_events_total", "Change events decoded from committed transactions, by op.", "op"),
		transactions: in.Counter("tidemark_capture_transactions_total", "Committed transactions read from the slot."),
		confirmed:    in.Gauge("tidemark_capture_confirmed_lsn_bytes", "LSN (bytes) last confirmed to Postgres: everything before it is in Kafka."),
		slotLag:      in.Gauge("tidemark_slot_lag_bytes", "WAL retained by the slot: pg_current_wal_lsn() - confirmed_flush_lsn."),
		walStatus:    in.GaugeVec("tidemark_slot_wal_status", "1 for the slot's current wal_status.", "status"),
		safeWAL:      in.Gauge("tidemark_slot_safe_wal_size_bytes", "pg_replication_slots.safe_wal_size (-1 when unlimited)."),
		resets:       in.CounterVec("tidemark_capture_resets_total", "Reset markers sent for detected gaps, by reason.", "reason"),
		heartbeats:   in.Counter("tidemark_capture_heartbeats_total", "Heartbeats read back from the stream (each sends resolved markers)."),
		beatSkipped:  in.Counter("tidemark_capture_heartbeats_skipped_total", "Heartbeat-prefix messages or heartbeat-row updates skipped because they do not carry a time (not written by capture)."),
		invisible:    in.Counter("tidemark_capture_invisible_wait_seconds_total", "Time the stream was held on a decoded commit not yet visible to new snapshots (a synchronous standby's wait)."),
		checks:       in.Counter("tidemark_capture_visibility_checks_total", "Snapshots taken to learn that decoded commits are visible (one answers for every transaction decoded while the previous was asked)."),
		active:       in.Gauge("tidemark_capture_active", "1 while this process holds the slot and streams, 0 while it stands by or retries."),
		undecodable: in.CounterVec("tidemark_capture_undecodable_rows_total",
			"Changes of the captured table that could not become events (a NULL, non-integer or non-positive version, a NULL or empty key), by the action taken instead: purge (the key) or reset (every partition).", "action"),
	}
	if err := in.Err(); err != nil {
		return nil, fmt.Errorf("capture: register metrics: %w", err)
	}
	for _, op := range []string{"upsert", "delete", "truncate"} {
		m.events.WithLabelValues(op)
	}
	for _, a := range []string{actionPurge, actionReset} {
		m.undecodable.WithLabelValues(a)
	}
	for _, r := range []string{ReasonSlotMissing, ReasonSlotLost, ReasonSystemIDChanged, ReasonTimelineChanged, ReasonUndecodableRow, ReasonPublicationChanged, ReasonTableChanged, ReasonStateMissing} {
		m.resets.WithLabelValues(r)
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
