package e2ebench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The load through pgbench: the pgx load generator (32 connections and a
// goroutine per transaction) was the largest CPU consumer on the box, ahead
// of every stage. pgbench paces the same transactions (-R, one client per
// worker) from a custom script at a fraction of the cost. What was changed
// is read back from Postgres: the sum of versions of the phase's tenant
// before and after (every change adds one), over all rows and over the
// timed ones.

// findPgbench is pgbench beside pg_recvlogical, or on PATH ("" when neither:
// the pgx generator is used).
func findPgbench(recvlogical string) string {
	if p := filepath.Join(filepath.Dir(recvlogical), "pgbench"); recvlogical != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, _ := exec.LookPath("pgbench")
	return p
}

// pgbenchScript updates rows consecutive rows of tenant per transaction,
// taking the transactions in order from a sequence (seq) as the pgx
// generator does: no row changes twice within a phase unless the phase wraps
// around the rows, so the applier never merges two timed changes of a key.
func pgbenchScript(tenant, seq string, keys, rows int) string {
	return fmt.Sprintf("WITH n AS MATERIALIZED (SELECT nextval('%s') AS j)\n"+
		"UPDATE catalog.items SET version = version + 1 WHERE tenant_id = '%s' AND item_id IN\n"+
		"(SELECT 'i' || lpad(((j * %d + g) %% %d)::text, 7, '0') FROM n, generate_series(0, %d) g);\n", seq, tenant, rows, keys, rows-1)
}

// versions is the sum of the tenant's versions, over all rows and over the
// rows the bench times (item numbers that are multiples of every; none when
// every is 0).
func (l *load) versions(ctx context.Context) (all, timed int64, err error) {
	zeros := 0
	for n := l.every; n > 1; n /= 10 {
		zeros++
	}
	err = l.pool.QueryRow(ctx, `SELECT coalesce(sum(version), 0)::bigint,
		coalesce(sum(version) FILTER (WHERE $2 > 0 AND right(item_id, $3) = repeat('0', $3)), 0)::bigint
		FROM catalog.items WHERE tenant_id = $1`, l.tenant, l.every, zeros).Scan(&all, &timed)
	if err != nil {
		return 0, 0, fmt.Errorf("bench e2e: versions of %s: %w", l.tenant, err)
	}
	return all, timed, nil
}

var (
	pgbenchProcessed = regexp.MustCompile(`number of transactions actually processed: (\d+)`)
	pgbenchLag       = regexp.MustCompile(`rate limit schedule lag: avg ([0-9.]+) \(max ([0-9.]+)\) ms`)
)

// runPgbench runs the load for d through pgbench.
func (l *load) runPgbench(ctx context.Context, d time.Duration) (loadResult, error) {
	all0, timed0, err := l.versions(ctx)
	if err != nil {
		return loadResult{}, err
	}
	f, err := os.CreateTemp("", "tidemark-e2e-*.pgbench")
	if err != nil {
		return loadResult{}, err
	}
	defer os.Remove(f.Name())
	seq := "public.tidemark_e2e_" + l.tenant
	if _, err := l.pool.Exec(ctx, "DROP SEQUENCE IF EXISTS "+seq+"; CREATE SEQUENCE "+seq+" MINVALUE 0 START 0"); err != nil {
		f.Close()
		return loadResult{}, fmt.Errorf("bench e2e: %s: %w", seq, err)
	}
	if _, err := f.WriteString(pgbenchScript(l.tenant, seq, l.keys, l.rows)); err != nil {
		f.Close()
		return loadResult{}, err
	}
	f.Close()
	secs := max(1, int(d.Round(time.Second)/time.Second))
	cmd := exec.CommandContext(ctx, l.pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(l.workers), "-j", "2",
		"-R", strconv.FormatFloat(l.txRate, 'f', -1, 64), "-T", strconv.Itoa(secs), "-f", f.Name(), l.dsn)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(began)
	if err != nil {
		return loadResult{}, fmt.Errorf("bench e2e: pgbench: %w: %s", err, out)
	}
	all1, timed1, err := l.versions(ctx)
	if err != nil {
		return loadResult{}, err
	}
	res := loadResult{Changes: all1 - all0, Observed: timed1 - timed0, Elapsed: elapsed, Late: -1,
		CPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	if m := pgbenchProcessed.FindSubmatch(out); m != nil {
		res.Commits, _ = strconv.ParseInt(string(m[1]), 10, 64)
	} else {
		return res, fmt.Errorf("bench e2e: pgbench printed no transaction count: %s", out)
	}
	if m := pgbenchLag.FindSubmatch(out); m != nil {
		res.Lag = "max lag " + string(m[2]) + " ms"
	}
	if want := res.Commits * int64(l.rows); res.Changes != want {
		return res, fmt.Errorf("bench e2e: pgbench committed %d transactions of %d rows, but versions rose by %d: %s",
			res.Commits, l.rows, res.Changes, strings.TrimSpace(string(out)))
	}
	return res, nil
}
