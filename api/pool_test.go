package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/tidemark/internal/pgprimary"
	"github.com/tidemark/tidemark/lab/testenv"
)

// serve (and the auditor and warmer, which read through serve's pool) must
// refuse a hot standby: at start, and on a connection opened after the
// primary went away and the DSN's next host is a standby.
func TestNewPoolRefusesStandby(t *testing.T) {
	primary := testenv.StartPostgres(t)
	db := primary.NewDatabase(t)
	standby := testenv.StartStandby(t, primary, "")
	ctx := testenv.Context(t, 120*time.Second)

	_, err := NewPool(ctx, standby.DSN(db), DefaultConfig())
	if !errors.Is(err, pgprimary.ErrStandby) {
		t.Fatalf("NewPool on a standby: want an error wrapping pgprimary.ErrStandby, got %v", err)
	}
	t.Logf("refused at start: %v", err)

	// Both hosts, the primary first: start-up lands on the primary.
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable", primary.Port, standby.Port, db)
	pool, err := NewPool(ctx, dsn, DefaultConfig())
	if err != nil {
		t.Fatalf("NewPool on primary,standby: %v", err)
	}
	defer pool.Close()
	primary.Stop()
	pool.Reset() // the primary's connections are dead; the next one is new
	testenv.Eventually(t, 60*time.Second, "a query after the primary stopped is refused as a standby", func() error {
		_, err := pool.Exec(ctx, "SELECT 1")
		if errors.Is(err, pgprimary.ErrStandby) {
			return nil
		}
		return fmt.Errorf("want an error wrapping pgprimary.ErrStandby, got %v", err)
	})
}

// An operator's pool_max_conns wins over serve's computed pool size.
func TestNewPoolHonoursPoolMaxConns(t *testing.T) {
	dsn := testenv.SharedPostgres(t).MigratedDatabase(t)
	ctx := testenv.Context(t, 30*time.Second)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	pool, err := NewPool(ctx, dsn+sep+"pool_max_conns=3", DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 3 {
		t.Fatalf("pool_max_conns=3 in the DSN: pool MaxConns = %d, want 3", got)
	}
}
