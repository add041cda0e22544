// Package capture is the Postgres side of tidemark: it checks the server,
// the publication and the slot, streams pgoutput over logical replication,
// decodes committed changes of the captured table into schema events, emits
// heartbeats, watches slot health, detects gaps, and hands every record to
// the relay, confirming to Postgres only what Kafka holds.
package capture

import (
	"regexp"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/config"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/relay"
)

// Heartbeat modes.
const (
	HeartbeatAuto    = "auto"    // logical message, falling back to the heartbeat row if not allowed
	HeartbeatMessage = "message" // pg_logical_emit_message only
	HeartbeatRow     = "row"     // update the heartbeat row only
)

// Config of a capture stage.
type Config struct {
	PG string // Postgres DSN (a replication connection is derived from it)
	// PGFile, when set, is the file holding the DSN (a mounted Secret, a
	// Vault agent's file): read again for every connection, so a rotated
	// password is picked up at the next reconnect. PG may then be empty.
	PGFile string
	Relay  relay.Config // Kafka side: brokers, topic, partitions, in-flight bound

	Slot        string
	Publication string
	CreateSlot  bool // create the slot when missing

	// The captured table and its columns.
	Table         string // schema.table
	TenantColumn  string
	ItemColumn    string
	VersionColumn string
	StateColumn   string // "" = no tombstones; an update setting it to DeletedState is op delete
	DeletedState  string

	Heartbeat       time.Duration
	HeartbeatMargin time.Duration // resolved ts = heartbeat time - margin
	HeartbeatMode   string
	HeartbeatTable  string // schema.table with (id=1, beat_at timestamptz), for HeartbeatRow

	StatusInterval  time.Duration // standby status at least this often
	SlotPoll        time.Duration // pg_replication_slots poll
	RetryMin        time.Duration // backoff while the slot is active elsewhere or Postgres is down
	RetryMax        time.Duration
	ShutdownTimeout time.Duration // bound on the final producer flush
}

// DefaultConfig is tidemark capture's defaults (PG and brokers are required).
func DefaultConfig() Config {
	return Config{
		Relay:           relay.DefaultConfig(),
		Slot:            promise.Slot,
		Publication:     promise.Publication,
		CreateSlot:      true,
		Table:           promise.Table,
		TenantColumn:    "tenant_id",
		ItemColumn:      "item_id",
		VersionColumn:   "version",
		StateColumn:     "state",
		DeletedState:    "deleted",
		Heartbeat:       time.Second,
		HeartbeatMargin: promise.HeartbeatMargin,
		HeartbeatMode:   HeartbeatAuto,
		HeartbeatTable:  "tidemark.heartbeat",
		StatusInterval:  time.Second,
		SlotPoll:        5 * time.Second,
		RetryMin:        250 * time.Millisecond,
		RetryMax:        2 * time.Second,
		ShutdownTimeout: 30 * time.Second,
	}
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Validate reports every problem at once, one config.FieldError per field
// (the relay's under "Relay.").
func (c Config) Validate() error {
	var p config.Problems
	if strings.TrimSpace(c.PG) == "" && c.PGFile == "" {
		p.Add("PG", "is required")
	}
	p.Nested("Relay", c.Relay.Validate())
	if !slotName.MatchString(c.Slot) {
		p.Add("Slot", "%q must be 1-63 lowercase letters, digits or underscores", c.Slot)
	}
	if strings.TrimSpace(c.Publication) == "" {
		p.Add("Publication", "must not be empty")
	}
	if _, _, ok := splitTable(c.Table); !ok {
		p.Add("Table", "%q must be schema.table", c.Table)
	}
	for _, f := range [][2]string{{"TenantColumn", c.TenantColumn}, {"ItemColumn", c.ItemColumn}, {"VersionColumn", c.VersionColumn}} {
		if strings.TrimSpace(f[1]) == "" {
			p.Add(f[0], "must not be empty")
		}
	}
	// Longer, and an idle catalog's watermark reaches status's AT RISK level
	// between beats (promise.MaxHeartbeat).
	if c.Heartbeat < 10*time.Millisecond || c.Heartbeat > promise.MaxHeartbeat {
		p.Add("Heartbeat", "must be between 10ms and %s (got %s): on an idle catalog the watermark ages by it", promise.MaxHeartbeat, c.Heartbeat)
	}
	if c.HeartbeatMargin < 0 || c.HeartbeatMargin > promise.HeartbeatMargin {
		// Reset margins (promise.ResetMargin) are sized for this bound.
		p.Add("HeartbeatMargin", "must be between 0 and %s (got %s)", promise.HeartbeatMargin, c.HeartbeatMargin)
	}
	switch c.HeartbeatMode {
	case HeartbeatAuto, HeartbeatMessage, HeartbeatRow:
	default:
		p.Add("HeartbeatMode", "%q must be auto, message or row", c.HeartbeatMode)
	}
	if c.HeartbeatMode != HeartbeatMessage {
		if _, _, ok := splitTable(c.HeartbeatTable); !ok {
			p.Add("HeartbeatTable", "%q must be schema.table", c.HeartbeatTable)
		}
	}
	if c.StatusInterval <= 0 || c.StatusInterval > 10*time.Second {
		p.Add("StatusInterval", "must be in (0, 10s] (got %s)", c.StatusInterval)
	}
	p.Positive("SlotPoll", c.SlotPoll)
	p.Positive("RetryMin", c.RetryMin)
	if c.RetryMax < c.RetryMin {
		p.Add("RetryMax", "must be at least the minimum retry %s (got %s)", c.RetryMin, c.RetryMax)
	}
	p.Positive("ShutdownTimeout", c.ShutdownTimeout)
	return p.Err()
}

func splitTable(t string) (schemaName, table string, ok bool) {
	s, n, ok := strings.Cut(t, ".")
	return s, n, ok && s != "" && n != "" && !strings.Contains(n, ".")
}
