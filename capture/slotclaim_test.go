package capture_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/lab/testenv"
)

// A capture of another deployment given the same --slot (its own topic) is
// refused while the slot exists and is claimed for the first deployment's
// topic, at once and naming both, instead of waiting as the passive
// capture and taking the slot over when the first one restarts. A second
// capture of the same deployment (same topic) is the passive one as
// before; once the slot is dropped, the next capture claims it for its
// topic. Fails with the claim taken out of session (the second capture
// waits as the passive one: runErr's 30 s pass).
func TestSlotClaimedForAnotherTopicIsRefused(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, _, cfg := newRig(t, pg)
	first := start(t, cfg)
	first.waitReady(t)

	other := cfg
	other.Relay.Topic = testenv.Unique(t, "other-topic")
	wantPreflight(t, runErr(t, other), `replication slot "`+cfg.Slot+`" streams to topic "`+cfg.Relay.Topic+`"`,
		`this capture writes topic "`+other.Relay.Topic+`"`, "give this deployment its own --slot",
		"DELETE FROM tidemark.capture_slots WHERE slot = '"+cfg.Slot+"'")

	passive := start(t, cfg) // the same deployment's second capture: no refusal
	if err := first.wait(t); err != nil {
		t.Fatalf("first capture: %v", err)
	}
	passive.waitReady(t)
	if err := passive.wait(t); err != nil {
		t.Fatalf("second capture: %v", err)
	}

	exec(t, connect(t, dsn), "SELECT pg_drop_replication_slot($1)", cfg.Slot)
	moved := start(t, other)
	moved.waitReady(t)
	var topic string
	if err := connect(t, dsn).QueryRow(t.Context(), "SELECT topic FROM tidemark.capture_slots WHERE slot = $1", cfg.Slot).Scan(&topic); err != nil {
		t.Fatal(err)
	}
	if topic != other.Relay.Topic {
		t.Fatalf("slot claimed for %q after it was dropped and %q's capture started, want the latter", topic, other.Relay.Topic)
	}
}

// Without the claims' table (a database not migrated to this release)
// capture is not ready, saying what to run, and streams once it exists.
func TestWaitsForTheSlotClaims(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, _, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	exec(t, conn, "ALTER TABLE tidemark.capture_slots RENAME TO capture_slots_later")
	r := start(t, cfg)
	testenv.Eventually(t, 30*time.Second, "capture not ready, naming the table", func() error {
		err := r.c.Ready(context.Background())
		if err == nil || !strings.Contains(err.Error(), "tidemark.capture_slots does not exist: run tidemark migrate") {
			return fmt.Errorf("Ready = %v", err)
		}
		return nil
	})
	exec(t, conn, "ALTER TABLE tidemark.capture_slots_later RENAME TO capture_slots")
	r.waitReady(t)
}

// Two deployments' captures that both claimed a slot before it existed
// (the second claim replaces the first) are told apart once the slot is
// taken: the capture claims it again then. Here the slot exists and is
// held by another connection (the other deployment's capture streaming),
// this capture's first claim finds no row and stands by, the other
// deployment's claim replaces its row, and when the slot is let go this
// capture takes it, claims again and is refused. Fails with the second
// claim taken out of session (the capture streams the other's slot).
func TestSlotClaimedAgainOnceTaken(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	dsn, _, cfg := newRig(t, pg)
	conn := connect(t, dsn)
	exec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", cfg.Slot)
	holder := holdSlot(t, dsn, cfg.Slot)

	r := start(t, cfg)
	ctx := testenv.Context(t, 60*time.Second)
	testenv.Eventually(t, 30*time.Second, "the standing-by capture's claim", func() error {
		var topic string
		if err := conn.QueryRow(ctx, "SELECT topic FROM tidemark.capture_slots WHERE slot = $1", cfg.Slot).Scan(&topic); err != nil {
			return err
		}
		if topic != cfg.Relay.Topic {
			return fmt.Errorf("claimed for %q", topic)
		}
		return nil
	})
	other := testenv.Unique(t, "other-topic")
	exec(t, conn, "UPDATE tidemark.capture_slots SET topic = $2 WHERE slot = $1", cfg.Slot, other)
	holder.Close(context.Background())
	select {
	case err := <-r.done:
		r.done <- err // for the test's cleanup (running.wait)
		wantPreflight(t, err, `streams to topic "`+other+`"`, `this capture writes topic "`+cfg.Relay.Topic+`"`)
	case <-ctx.Done():
		t.Fatalf("the capture took the slot claimed for %q and kept streaming it", other)
	}
}

// holdSlot streams slot on a replication connection of the test's own, as
// another capture would, until it is closed (or the test ends).
func holdSlot(t *testing.T, dsn, slot string) *pgconn.PgConn {
	t.Helper()
	ctx := testenv.Context(t, 30*time.Second)
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pc.RuntimeParams["replication"] = "database"
	rc, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close(context.Background()) })
	if err := pglogrepl.StartReplication(ctx, rc, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'tidemark'"}}); err != nil {
		t.Fatal(err)
	}
	return rc
}
