package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/relay"
	"github.com/tidemark/tidemark/schema"
)

// Reset reasons (label values of tidemark_capture_resets_total).
const (
	ReasonSlotMissing     = "slot_missing"
	ReasonSlotLost        = "slot_lost"
	ReasonSystemIDChanged = "system_identifier_changed"
	ReasonTimelineChanged = "timeline_changed"
	ReasonTopicRecreated  = "topic_recreated"
	ReasonKafkaDataLoss   = "kafka_data_loss" // the producer saw acknowledged records lost
	// ReasonPublicationChanged: what the publication streams of the table
	// changed (the table dropped from it and added again, its columns, its
	// options): changes made meanwhile may never have been streamed, while
	// heartbeats went on.
	ReasonPublicationChanged = "publication_changed"
	// ReasonTableChanged: the table's definition changed (a rewrite such
	// as ALTER COLUMN ... TYPE ... USING, a column added, dropped or
	// retyped, an enum label of a column's type renamed, a partition
	// attached or detached): values changed with no row change streamed.
	ReasonTableChanged = "table_changed"
	// ReasonStateMissing: the topic holds history but the state topic no
	// record of this slot (deleted, or expired under a retention an
	// operator gave it): what changed while capture was stopped (the
	// server, the publication, the table's definition) cannot be compared.
	ReasonStateMissing = "state_missing"
	// ReasonColdStart: no earlier run is known (no state, no record on the
	// topic). Changes committed before the slot existed were never read,
	// while the cache tier may hold values filled from the source before
	// then: without a reset the first watermark would extend them.
	ReasonColdStart = "cold_start"
)

// checkGap finds every way changes may have been lost since the last run
// and, if any, sends a reset marker to every partition before streaming.
// The reasons are first saved as pending in the state topic, so a crash
// between creating the slot and Kafka acking the marker still resets on
// the next start. A clean restart with the slot present sends nothing; a
// first start (no earlier run known) sends a cold_start reset, since the
// cache tier may hold values read before the slot existed.
func (c *Capture) checkGap(ctx context.Context, conn *pgx.Conn, si slotInfo, ident pglogrepl.IdentifySystemResult, history bool, partitions int) (slotInfo, error) {
	st, found, err := c.relay.LoadState(ctx, c.cfg.Slot)
	if err != nil {
		return si, err
	}
	var reasons []string
	add := func(r string) {
		if r != "" && !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	for _, r := range strings.Split(st.PendingReset, ",") {
		add(r)
	}
	if c.dataLoss {
		add(ReasonKafkaDataLoss)
	}
	// An earlier run is known from the topic's records or from the state
	// topic: either one is enough, since a recreated topic loses the first
	// and the state topic may survive it.
	if !si.exists && (history || found) {
		add(ReasonSlotMissing)
	}
	if !history && !found {
		// A first start, whether capture creates the slot or an operator
		// made it beforehand: the reset time is read after the slot exists,
		// so it is never before the slot's start.
		add(ReasonColdStart)
	}
	if !found && history && si.exists {
		// The slot carried on (no slot_missing), but nothing says what it
		// was carrying from: when unsure, drop.
		add(ReasonStateMissing)
	}
	if found && !history {
		// The state topic records an earlier run but the topic holds no
		// record: it was recreated, and what the applier had not yet read
		// from the old one is gone.
		add(ReasonTopicRecreated)
	}
	if si.exists && si.walStatus == "lost" {
		add(ReasonSlotLost)
	}
	if found && st.SystemID != ident.SystemID {
		add(ReasonSystemIDChanged)
		// A restore or a new server looks like this; so does a second
		// deployment whose capture feeds the same topic with the same
		// slot name, whose markers would then vouch for this one's cache.
		c.log.Warn("the state topic's record of this slot names another Postgres server: resetting the cache; if a capture of another deployment feeds this topic, give each deployment its own --topic and --slot",
			"slot", c.cfg.Slot, "state_topic", relay.StateTopic(c.cfg.Relay.Topic), "recorded_system_identifier", st.SystemID, "recorded_database", st.Database,
			"system_identifier", ident.SystemID, "database", ident.DBName)
	} else if found && st.Timeline != ident.Timeline && !(si.exists && si.failover) {
		// A failover slot (Postgres 17+) present on the promoted server was
		// synchronised from the old primary, which with
		// synchronized_standby_slots never sent capture a change the standby
		// lacked: the slot resumes where capture confirmed, with no gap.
		add(ReasonTimelineChanged)
	}
	if found && st.Publication != "" && st.Publication != si.fp.publication {
		add(ReasonPublicationChanged)
	}
	if found && st.Table != "" && st.Table != si.fp.table {
		add(ReasonTableChanged)
	}
	now := relay.State{SystemID: ident.SystemID, Timeline: ident.Timeline, Database: ident.DBName, Publication: si.fp.publication, Table: si.fp.table}
	if len(reasons) > 0 {
		pending := now
		pending.PendingReset = strings.Join(reasons, ",")
		if err := c.relay.SaveState(ctx, c.cfg.Slot, pending); err != nil {
			return si, err
		}
	}
	if si.exists && si.walStatus == "lost" {
		// A lost slot can never stream again; the reset covers the hole.
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", c.cfg.Slot); err != nil {
			return si, fmt.Errorf("capture: drop lost slot: %w", err)
		}
		si.exists = false
	}
	if !si.exists {
		if err := c.createSlot(ctx, conn); err != nil {
			return si, err
		}
		si.exists = true
	}
	if len(reasons) > 0 {
		// The reset's time is the Postgres server's clock, the clock commit
		// timestamps and heartbeats use (capture runs no clock guard of its
		// own); the applier adds promise.ResetMargin when it sets reset_at.
		if err := c.awaitCommittedVisible(ctx, conn); err != nil {
			return si, err
		}
		var at time.Time
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
			return si, fmt.Errorf("capture: read the server clock for the reset marker: %w", err)
		}
		if err := c.reset(ctx, at, partitions, reasons); err != nil {
			return si, err
		}
	}
	if len(reasons) > 0 || !found || st != now {
		if err := c.relay.SaveState(ctx, c.cfg.Slot, now); err != nil {
			return si, err
		}
	}
	c.dataLoss = false // the reset is in Kafka
	c.saved = now
	return si, nil
}

// source names the stream this capture's markers vouch for, from the
// state its gap check saved: the server (system identifier), the database
// and the table (schema.Resolved.Source). Two captures of one source (an
// active/passive pair, a promoted standby) name the same one.
func (c *Capture) source() string {
	return schema.SourceName(c.saved.SystemID, c.saved.Database, c.cfg.Table)
}

func (c *Capture) createSlot(ctx context.Context, conn *pgx.Conn) error {
	// Said before, not after: a long transaction anywhere on the server
	// holds this call until it ends.
	c.log.Info("creating replication slot: waits for the transactions running on the server to end", "slot", c.cfg.Slot)
	var lsn string
	q := "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')"
	if conn.PgConn().ParameterStatus("server_version") >= "17" {
		// failover: standbys with sync_replication_slots keep a copy, so a
		// promotion keeps the slot and needs no reset.
		q = "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput', false, false, true)"
	}
	err := conn.QueryRow(ctx, q, c.cfg.Slot).Scan(&lsn)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42710" { // duplicate_object: another instance was faster
		return nil
	}
	if err != nil {
		if pe := replicationRefused(conn.Config().User, err); pe != nil {
			return pe
		}
		return fmt.Errorf("capture: create slot %s: %w", c.cfg.Slot, err)
	}
	c.log.Info("created replication slot", "lsn", lsn)
	return nil
}

// reset sends one reset marker (reset_time = at, the server's clock) to
// every partition and waits until Kafka holds them.
func (c *Capture) reset(ctx context.Context, at time.Time, partitions int, reasons []string) error {
	reason := strings.Join(reasons, ",")
	v := schema.Encode(&schema.Reset{ResetTime: at, Reason: reason})
	tr := relay.NewTracker(0)
	x := tr.Begin()
	for p := range partitions {
		c.relay.Produce(tr, x, schema.MarkerKey(int32(p)), int32(p), v, time.Time{})
	}
	tr.Close(x, 0)
	if err := c.relay.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-c.relay.Err():
		return err
	default:
	}
	for _, r := range reasons {
		c.m.resets.WithLabelValues(r).Inc()
	}
	c.log.Warn("gap detected: sent a reset marker to every partition; cached entries observed before it will not be extended",
		"reason", reason, "partitions", partitions)
	return nil
}

// committedRunningSQL lists the transactions that are committed (in the
// commit log) but still in the running set: a commit waiting for a
// synchronous standby, invisible to new snapshots.
const committedRunningSQL = `SELECT coalesce(array_agg(x::text::bigint), '{}')
	FROM pg_snapshot_xip(pg_current_snapshot()) x WHERE pg_xact_status(x) = 'committed'`

// awaitCommittedVisible waits until every transaction that is committed but
// not yet visible is visible. Such a commit may lie before the slot's start
// (it is never streamed), and a reader after the reset would still read the
// row it replaced and have it extended by the watermark; the reset's time
// is read only once it shows. A transaction still in progress commits after
// the slot's start, so it is streamed (and held until visible) as usual.
func (c *Capture) awaitCommittedVisible(ctx context.Context, conn *pgx.Conn) error {
	var xids []int64
	if err := conn.QueryRow(ctx, committedRunningSQL).Scan(&xids); err != nil {
		return fmt.Errorf("capture: list committed transactions not yet visible: %w", err)
	}
	if len(xids) == 0 {
		return nil
	}
	c.log.Warn("committed transactions are not yet visible (waiting for a synchronous standby?): the reset marker waits for them", "xids", xids)
	backoff := 5 * time.Millisecond
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_snapshot_xip(pg_current_snapshot()) x WHERE x::text::bigint = ANY($1)`, xids).Scan(&n); err != nil {
			return fmt.Errorf("capture: wait for committed transactions to be visible: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 250*time.Millisecond)
	}
}
