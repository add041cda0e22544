package capture_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
