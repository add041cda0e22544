package chaos

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The source budget is the second promise a run judges: source reads per
// second, counted by Postgres itself (pg_stat_statements, sampled once a
// second), never above the budget the serve processes were given, in total
// and per class. Like the freshness check it asks the pipeline nothing: a
// bug in the API's own bookkeeping cannot hide itself.

// KindBudget: a second in which the source served more reads than the
// budget allows (in total, or of one class), beyond the burst tolerance.
const KindBudget Kind = "budget"

// Source-read classes as the source tells them apart: the API's read of one
// item is one statement per budget class (`tidemark source read: <class>`),
// and the auditor's batched read (`tidemark source versions`) is background
// work counted by the rows it read.
const (
	ClassForeground     = "foreground"
	ClassBackground     = "background"
	ClassReadYourWrites = "read_your_writes"
	ClassAudit          = "audit"   // background budget; one read per row
	ClassUnknown        = "unknown" // a source read that names no class (an older build)
)

// TotalClass names the total in a BudgetViolation.
const TotalClass = "total"

var classOfRead = regexp.MustCompile(`tidemark source read: ([a-z_]+)`)

// sourceCounter samples pg_stat_statements: reads per class since the
// previous sample.
type sourceCounter struct {
	pool *pgxpool.Pool
	prev map[int64]float64 // queryid -> calls (rows for the auditor) at the previous sample
	at   time.Time
}

func newSourceCounter(pool *pgxpool.Pool) *sourceCounter {
	return &sourceCounter{pool: pool}
}

// sample returns the reads per class since the previous successful sample,
// when it was taken and how long it covers; ok is false on the first sample
// (the baseline) and when the view cannot be read (Postgres restarting: the
// next sample covers the gap).
func (c *sourceCounter) sample(ctx context.Context) (reads map[string]float64, at time.Time, interval time.Duration, ok bool) {
	cur, class, at, err := SourceStatements(ctx, c.pool)
	if err != nil {
		return nil, time.Time{}, 0, false
	}
	prev, prevAt := c.prev, c.at
	c.prev, c.at = cur, at
	if prev == nil {
		return nil, at, 0, false
	}
	return ReadsSince(prev, cur, class), at, at.Sub(prevAt), true
}

// Querier is what SourceStatements reads through: a pool or a connection.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// SourceStatements reads the source's own count of its reads from
// pg_stat_statements: per statement (queryid) its calls, the auditor's
// batched read by its rows, and its class; at is when the view was read.
func SourceStatements(ctx context.Context, db Querier) (count map[int64]float64, class map[int64]string, at time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	defer cancel()
	sent := time.Now()
	rows, err := db.Query(ctx, `SELECT queryid, query, calls, rows FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND (query LIKE '%tidemark source read%' OR query LIKE '%tidemark source versions%')`)
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer rows.Close()
	count, class = map[int64]float64{}, map[int64]string{}
	for rows.Next() {
		var id, calls, nrows int64
		var q string
		if err := rows.Scan(&id, &q, &calls, &nrows); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("pg_stat_statements: %w", err)
		}
		switch m := classOfRead.FindStringSubmatch(q); {
		case strings.Contains(q, "tidemark source versions"):
			count[id], class[id] = float64(nrows), ClassAudit
		case m != nil:
			count[id], class[id] = float64(calls), m[1]
		default:
			count[id], class[id] = float64(calls), ClassUnknown
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("pg_stat_statements: %w", err)
	}
	// The statement ran somewhere between sending and now.
	return count, class, sent.Add(time.Since(sent) / 2), nil
}

// ReadsSince is the reads per class between two SourceStatements counts.
func ReadsSince(prev, cur map[int64]float64, class map[int64]string) map[string]float64 {
	reads := map[string]float64{}
	for id, n := range cur {
		d := n - prev[id] // a statement first seen now: all its reads are new
		if d < 0 {
			d = n // the statistics were reset (a new server): count from zero
		}
		reads[class[id]] += d
	}
	return reads
}

// BudgetLimits is the budget the serve processes run with, as the checker
// judges it.
type BudgetLimits struct {
	Total float64 `json:"total_per_s"` // every class together
	// Classes are the per-class limits (reads/s) the source can tell apart;
	// the auditor's reads count in ClassBackground.
	Classes map[string]float64 `json:"classes_per_s"`
	// Burst is the GCRA's burst window: a bucket of rate r admits up to
	// r × Burst reads at once on top of its rate.
	Burst Duration `json:"burst"`
	// LockWait is the longest a budgeted read waits on a lock before its
	// statement timeout ends it (serve's source timeout), and AtOnce the
	// most reads one statement counts (the auditor's batch, counted by its
	// rows, one statement at a time): see AllowedAtUnlock.
	LockWait Duration `json:"lock_wait"`
	AtOnce   float64  `json:"at_once"`
}

// Allowed is how many reads a limit of rate r/s allows in a sample covering
// interval: the rate over the interval, plus the tolerance: two bursts (the
// shared bucket's, and the per-process fallback buckets' at the moment
// Redis comes back with a bucket that was idle while it was away), plus one
// read (a bucket admits its first read at once).
func (l BudgetLimits) Allowed(r float64, interval time.Duration) float64 {
	return r*interval.Seconds() + 2*r*time.Duration(l.Burst).Seconds() + 1
}

// AllowedAtUnlock is what a limit of rate r/s allows on top of Allowed in
// a sample that overlaps the LockWait after the harness released a lock
// it held on the catalog (FaultRecord.Unlocked). The source counts a
// statement when it completes, so the reads the budget admitted at its
// rate while the table was locked, and that have not yet reached their
// statement timeout, all complete together when the lock goes: at most r ×
// LockWait of them, plus one auditor statement, which waits on the pool's
// longer timeout. The budget admitted them at its rate; the count bunches
// them. Without this a correct budget failed one run in twelve (a
// background second of 248 reads against 242, the second a long outage's
// lock was released).
func (l BudgetLimits) AllowedAtUnlock(r float64) float64 {
	return r*time.Duration(l.LockWait).Seconds() + l.AtOnce
}

// ToleranceText documents the tolerance for the report.
func (l BudgetLimits) ToleranceText() string {
	return fmt.Sprintf("rate × sampled interval + 2 × rate × %s (GCRA burst: the shared bucket and the fallback buckets at a handover) + 1; "+
		"within %s after a harness lock on the catalog is released, + rate × %[2]s + %[3]g (the reads that waited on the lock complete together)",
		time.Duration(l.Burst), time.Duration(l.LockWait), l.AtOnce)
}

// SourceSecond is one sample of the source's reads.
type SourceSecond struct {
	At       time.Time          `json:"at"`
	Interval Duration           `json:"interval"`
	Reads    map[string]float64 `json:"reads_by_class"`
}

// total reads of a sample.
func (s SourceSecond) total() float64 {
	var t float64
	for _, n := range s.Reads {
		t += n
	}
	return t
}

// classReads folds the auditor into the background class (its budget).
func (s SourceSecond) classReads(class string) float64 {
	n := s.Reads[class]
	if class == ClassBackground {
		n += s.Reads[ClassAudit]
	}
	return n
}

// BudgetViolation is one sample above the budget, with the faults in effect
// around it and each class's share of the reads.
type BudgetViolation struct {
	At        time.Time          `json:"at"`
	Offset    Duration           `json:"offset"` // since the run started
	Interval  Duration           `json:"interval"`
	Class     string             `json:"class"` // TotalClass or the class over its own limit
	Reads     float64            `json:"reads"`
	PerSecond float64            `json:"reads_per_s"`
	Limit     float64            `json:"limit_per_s"`
	Allowed   float64            `json:"allowed_reads"` // in the interval, with the tolerance
	Shares    map[string]float64 `json:"reads_by_class"`
	Faults    []string           `json:"faults_around"`
}

// faultsAround is how far before a second a fault window still counts as
// "around" it.
const faultsAround = 10 * time.Second

// JudgeBudget returns every sample above the total or a class's limit.
// faults are the run's faults, recovered until its end (windows as in the
// availability figures).
func JudgeBudget(l BudgetLimits, secs []SourceSecond, faults []FaultRecord, start, end time.Time) []BudgetViolation {
	var out []BudgetViolation
	for _, s := range secs {
		iv := time.Duration(s.Interval)
		unlock := unlockedIn(faults, s.At.Add(-iv), s.At, time.Duration(l.LockWait))
		check := func(class string, limit, reads float64) {
			allowed := l.Allowed(limit, iv)
			if unlock {
				allowed += l.AllowedAtUnlock(limit)
			}
			if reads > allowed {
				out = append(out, BudgetViolation{At: s.At, Offset: Duration(s.At.Sub(start)), Interval: s.Interval, Class: class,
					Reads: reads, PerSecond: reads / iv.Seconds(), Limit: limit, Allowed: allowed, Shares: s.Reads,
					Faults: faultsNear(faults, s.At.Add(-iv-faultsAround), s.At, start, end)})
			}
		}
		check(TotalClass, l.Total, s.total())
		classes := make([]string, 0, len(l.Classes))
		for c := range l.Classes {
			classes = append(classes, c)
		}
		sort.Strings(classes)
		for _, c := range classes {
			check(c, l.Classes[c], s.classReads(c))
		}
	}
	return out
}

// unlockedIn reports whether a sample covering (from, to] overlaps the
// wait after some fault released its lock on the catalog: [Unlocked,
// Unlocked + wait].
func unlockedIn(faults []FaultRecord, from, to time.Time, wait time.Duration) bool {
	for _, f := range faults {
		if !f.Unlocked.IsZero() && f.Unlocked.Before(to) && !f.Unlocked.Add(wait).Before(from) {
			return true
		}
	}
	return false
}

// faultsNear names the faults whose window (injected until recovered, or the
// end of the run) overlaps [from, to].
func faultsNear(faults []FaultRecord, from, to, start, end time.Time) []string {
	var out []string
	for _, f := range faults {
		until := f.Recovered
		if until.IsZero() {
			until = end
		}
		if f.Injected.After(to) || until.Before(from) {
			continue
		}
		d := fmt.Sprintf("%s %s injected +%s lifted +%s", f.Kind, f.Target, f.Injected.Sub(start).Round(100*time.Millisecond),
			f.Lifted.Sub(start).Round(100*time.Millisecond))
		if !f.Recovered.IsZero() {
			d += fmt.Sprintf(" recovered +%s", f.Recovered.Sub(start).Round(100*time.Millisecond))
		}
		out = append(out, d)
	}
	return out
}

// sharesText is "foreground 400, background 120, ..." in a stable order.
func sharesText(m map[string]float64) string {
	order := []string{ClassForeground, ClassBackground, ClassAudit, ClassReadYourWrites, ClassUnknown}
	var parts []string
	for _, c := range order {
		if n, ok := m[c]; ok && n > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", c, n))
		}
	}
	var rest []string
	for c, n := range m {
		if !slices.Contains(order, c) && n > 0 {
			rest = append(rest, fmt.Sprintf("%s %.0f", c, n))
		}
	}
	sort.Strings(rest)
	return strings.Join(append(parts, rest...), ", ")
}
