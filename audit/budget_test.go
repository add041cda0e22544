package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tidemark/tidemark/api"
	"github.com/tidemark/tidemark/audit"
	"github.com/tidemark/tidemark/lab/testenv"
)

// The auditor reads the source in statements of at most what one budget
// admission covers: a round of 20 entries under a background class whose
// full bucket holds 2 reads is statements of at most 2 rows, not one of 20
// (admitted in parts over a second, then read at once: a burst the source
// saw past the budget's, as pg_stat_statements counts it).
func TestAuditReadsNoMoreAtOnceThanAdmitted(t *testing.T) {
	scfg := api.DefaultConfig()
	scfg.BackgroundRate = 20 // 100 ms of burst: 2 reads at once
	e := newEnvWith(t, scfg)
	if _, err := e.pool.Exec(context.Background(), `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	if got := e.srv.BackgroundReadsAtOnce(); got != 2 {
		t.Fatalf("BackgroundReadsAtOnce = %d at 20 reads/s and a 100ms burst, want 2", got)
	}
	for i := range 20 {
		e.exec(`INSERT INTO catalog.items (tenant_id, item_id, version, display) VALUES ('acme', $1, 1, '{"v":1}')`, "i"+strconv.Itoa(i))
		e.fill("acme", "i"+strconv.Itoa(i), 1)
	}
	cfg := audit.DefaultConfig()
	cfg.Rate, cfg.Batch = 200, 20
	reg := prometheus.NewRegistry()
	e.auditor(cfg, reg)
	testenv.Eventually(t, 30*time.Second, "one round checked", func() error {
		if got := counter(t, reg, "tidemark_audit_checked_total"); got < 20 {
			return fmt.Errorf("checked = %v, want >= 20", got)
		}
		return nil
	})
	var calls, rows int64
	if err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(rows), 0)::bigint FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query LIKE '%tidemark source versions%'`).Scan(&calls, &rows); err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Fatal(errors.New("no audit statement counted by pg_stat_statements"))
	}
	if per := float64(rows) / float64(calls); per > 2 {
		t.Fatalf("the auditor read %d rows in %d statements (%.1f per statement); one admission covers at most 2", rows, calls, per)
	}
}
