// Package promise holds tidemark's freshness promise and the numbers derived
// from it (docs/design.md, "The promise"), and the default names the stages
// share, so every package, flag default and Lua script takes them from one
// place.
package promise

import "time"

// Bound is the promise: a display value is never served when its last
// observation of the source is older than this.
const Bound = 30 * time.Second

// ClockBound is how far any host's clock may be from the cache tier's: FILL
// refuses an observation time further than this in Redis's future, and the
// clock guard stops trusting a host past it.
const ClockBound = 100 * time.Millisecond

// HeartbeatMargin is the most capture subtracts from a heartbeat's time for
// its resolved marker (commit timestamps versus WAL order).
const HeartbeatMargin = 500 * time.Millisecond

// MaxHeartbeat is the longest heartbeat interval capture accepts, and
// WatermarkWarn the watermark age past which `tidemark status` says AT RISK
// and the TidemarkFreshnessAtRisk alert fires. On an idle catalog the
// watermark ages by the interval plus HeartbeatMargin between beats (3.5 s
// at most), so a healthy pipeline stays under the warning with room for a
// late beat; status refuses a warning level a healthy pipeline can reach.
const (
	MaxHeartbeat  = 3 * time.Second
	WatermarkWarn = 5 * time.Second
)

// ResetMargin is added to every reset time (a TRUNCATE's commit timestamp,
// capture's gap resets, the applier's gap and failover resets): a commit
// timestamp is taken before the commit is visible, and a read's observation
// time comes from a clock up to ClockBound off, on either side.
const ResetMargin = HeartbeatMargin + 2*ClockBound

// HardLifetime is the cache tier's hard lifetime of an entry from its
// effective observation: the promise minus the clock skew allowed on each of
// the two hosts that stamp and judge it (30 s - 2 x 100 ms = 29.8 s).
const HardLifetime = Bound - 2*ClockBound

// The default names the stages share; each package's DefaultConfig takes its
// default from here.
const (
	// Namespace is the cache tier's key prefix.
	Namespace = "catalog"
	// SourcePool names the shared source budget and the rollout settings:
	// one per source, whatever the namespace, so the namespaces of an
	// upgrade (and a reader of one's own) share one budget by default.
	SourcePool = "catalog"
	// Table is the source table (migrations create it).
	Table = "catalog.items"
	// Topic is the Kafka topic capture writes and the appliers read.
	Topic = "tidemark.invalidations"
	// Group is the appliers' Kafka consumer group.
	Group = "tidemark-applier"
	// Slot is capture's logical replication slot.
	Slot = "tidemark"
	// Publication is the Postgres publication capture streams (migrations
	// create it).
	Publication = "tidemark"
)
