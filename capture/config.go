// Package capture is the Postgres side of tidemark: it checks the server,
// the publication and the slot, streams pgoutput over logical replication,
// decodes committed changes of the captured table into schema events, emits
// heartbeats, watches slot health, detects gaps, and hands every record to
// the relay, confirming to Postgres only what Kafka holds.
package capture

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"tidemark/relay"
)

// Heartbeat modes.
const (
	HeartbeatAuto    = "auto"    // logical message, falling back to the heartbeat row if not allowed
	HeartbeatMessage = "message" // pg_logical_emit_message only
	HeartbeatRow     = "row"     // update the heartbeat row only
)

// Config of a capture stage.
type Config struct {
	PG    string       // Postgres DSN (a replication connection is derived from it)
	Relay relay.Config // Kafka side: brokers, topic, partitions, in-flight bound

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
		Slot:            "tidemark",
		Publication:     "tidemark",
		CreateSlot:      true,
		Table:           "catalog.items",
		TenantColumn:    "tenant_id",
		ItemColumn:      "item_id",
		VersionColumn:   "version",
		StateColumn:     "state",
		DeletedState:    "deleted",
		Heartbeat:       time.Second,
		HeartbeatMargin: 500 * time.Millisecond,
		HeartbeatMode:   HeartbeatAuto,
		HeartbeatTable:  "catalog.tidemark_heartbeat",
		StatusInterval:  time.Second,
		SlotPoll:        5 * time.Second,
		RetryMin:        250 * time.Millisecond,
		RetryMax:        2 * time.Second,
		ShutdownTimeout: 30 * time.Second,
	}
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// Validate reports every problem at once, naming the flag.
func (c Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if strings.TrimSpace(c.PG) == "" {
		add("--pg (TIDEMARK_PG) is required")
	}
	if err := c.Relay.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !slotName.MatchString(c.Slot) {
		add("--slot %q must be 1-63 lowercase letters, digits or underscores", c.Slot)
	}
	if strings.TrimSpace(c.Publication) == "" {
		add("--publication must not be empty")
	}
	if _, _, ok := splitTable(c.Table); !ok {
		add("--table %q must be schema.table", c.Table)
	}
	for _, f := range [][2]string{{"--tenant-column", c.TenantColumn}, {"--item-column", c.ItemColumn}, {"--version-column", c.VersionColumn}} {
		if strings.TrimSpace(f[1]) == "" {
			add("%s must not be empty", f[0])
		}
	}
	if c.Heartbeat < 10*time.Millisecond {
		add("--heartbeat %s must be at least 10ms", c.Heartbeat)
	}
	if c.HeartbeatMargin < 0 {
		add("--heartbeat-margin %s must not be negative", c.HeartbeatMargin)
	}
	switch c.HeartbeatMode {
	case HeartbeatAuto, HeartbeatMessage, HeartbeatRow:
	default:
		add("--heartbeat-mode %q must be auto, message or row", c.HeartbeatMode)
	}
	if c.HeartbeatMode != HeartbeatMessage {
		if _, _, ok := splitTable(c.HeartbeatTable); !ok {
			add("--heartbeat-table %q must be schema.table", c.HeartbeatTable)
		}
	}
	if c.StatusInterval <= 0 || c.StatusInterval > 10*time.Second {
		add("status interval %s must be in (0, 10s]", c.StatusInterval)
	}
	if c.SlotPoll <= 0 {
		add("--slot-poll %s must be positive", c.SlotPoll)
	}
	if c.RetryMin <= 0 || c.RetryMax < c.RetryMin {
		add("retry backoff %s..%s must be positive and ordered", c.RetryMin, c.RetryMax)
	}
	if c.ShutdownTimeout <= 0 {
		add("--shutdown-timeout %s must be positive", c.ShutdownTimeout)
	}
	return errors.Join(errs...)
}

func splitTable(t string) (schemaName, table string, ok bool) {
	s, n, ok := strings.Cut(t, ".")
	return s, n, ok && s != "" && n != "" && !strings.Contains(n, ".")
}
