package inspect

import (
	"errors"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/pgprimary"
	"github.com/tidemark/tidemark/lab/testenv"
)

// inspect compares cached versions with the source's: a standby's lagging
// rows would pass a stale entry or fail a fresh one, so it is refused.
func TestInspectRefusesStandby(t *testing.T) {
	primary := testenv.StartPostgres(t)
	db := primary.NewDatabase(t)
	standby := testenv.StartStandby(t, primary, "")
	cfg := DefaultConfig()
	cfg.PG = standby.DSN(db)
	_, err := sourceVersions(testenv.Context(t, 60*time.Second), cfg, []Entry{{Tenant: "t", Item: "i"}})
	if !errors.Is(err, pgprimary.ErrStandby) {
		t.Fatalf("inspect's source read on a standby: want an error wrapping pgprimary.ErrStandby, got %v", err)
	}
}
