package capture

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/tidemark/migrations"
)

// claimSlot binds the slot to this capture's topic in the source database
// (migrations.CaptureSlotsTable) before anything streams: one slot, one
// topic. Two captures of one deployment (active/passive) share both; a
// capture of another deployment left on the same --slot would otherwise
// wait as the passive one and take the slot over when the first one's
// capture restarts, streaming its changes into another topic while the
// first deployment's appliers see none. A claim holds while its slot
// exists: once the slot is dropped (a cold start, a retired deployment),
// the next capture claims it anew. A table that is missing or not
// granted is ErrNotSetUp (retried, not ready), a claim of another topic
// ErrPreflight (fatal: the operator's to fix).
func (c *Capture) claimSlot(ctx context.Context, conn *pgx.Conn) error {
	slot, topic := c.cfg.Slot, c.cfg.Relay.Topic
	var (
		claimed   string
		claimedAt time.Time
	)
	err := conn.QueryRow(ctx, `INSERT INTO `+migrations.CaptureSlotsTable+` AS c (slot, topic) VALUES ($1, $2)
		ON CONFLICT (slot) DO UPDATE SET topic = EXCLUDED.topic, claimed_at = now()
		WHERE c.topic = EXCLUDED.topic OR NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)
		RETURNING topic, claimed_at`, slot, topic).Scan(&claimed, &claimedAt)
	if errors.Is(err, pgx.ErrNoRows) { // claimed for another topic, and its slot exists
		err = conn.QueryRow(ctx, `SELECT topic, claimed_at FROM `+migrations.CaptureSlotsTable+` WHERE slot = $1`, slot).Scan(&claimed, &claimedAt)
		if err == nil {
			return preflightError("replication slot %q streams to topic %q (claimed %s), but this capture writes topic %q: "+
				"two deployments on one slot take it from each other; give this deployment its own --slot "+
				"(or, when this slot is to stream to %q from now on, the deployment of %q retired: DELETE FROM %s WHERE slot = '%s')",
				slot, claimed, claimedAt.UTC().Format(time.RFC3339), topic, topic, claimed, migrations.CaptureSlotsTable, slot)
		}
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
		return fmt.Errorf("%w: %s does not exist: run tidemark migrate (schema version %d), or tidemark adopt again for an adopted table",
			ErrNotSetUp, migrations.CaptureSlotsTable, migrations.Latest())
	case errors.As(err, &pe) && pe.Code == "42501": // insufficient_privilege
		return fmt.Errorf("%w: capture's role may not claim its slot in %s: GRANT SELECT, INSERT, UPDATE ON %s TO %s",
			ErrNotSetUp, migrations.CaptureSlotsTable, migrations.CaptureSlotsTable, conn.Config().User)
	case err != nil:
		return fmt.Errorf("capture: claim slot %q for topic %q: %w", slot, topic, err)
	}
	return nil
}
