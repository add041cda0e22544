package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// recorder collects the two histories and judges every answer once the
// source history is complete past it. With Keep set, both histories and
// every violation are written as JSON lines.
type recorder struct {
	checker Checker
	pool    *pgxpool.Pool

	mu      sync.Mutex
	pending []Answer
	seq     int64
	// From faults, taken over by the judge loop: unbumped writes (into src
	// at the next load) and violations judged by a fault itself.
	unbumpedIn  []Unbumped
	violationIn []Violation

	// Owned by the judge loop.
	src      *Source
	lowXid   uint64    // transactions below it had ended at the previous load
	loadedAt time.Time // every commit before it (less visibilityLag) is in src
	// snapAfter: the previous load's snapshot was taken after this instant;
	// a commit it did not see was not visible then.
	snapAfter time.Time
	stats     answerStats
	reads     readSeconds // the read SLO's figures, by second
	keys      keyReads    // which keys were read when (the refill a fault may need)

	keep                       bool
	answersF, commitsF, violsF *os.File
	answersW, commitsW, violsW *bufio.Writer
	answersE, commitsE, violsE *json.Encoder
}

// visibilityLag is how long after its commit timestamp a transaction may
// take to become visible to a new snapshot.
const visibilityLag = time.Second

// firstViolations is how many violations the report shows in full.
const firstViolations = 5

type answerStats struct {
	Answers    int64
	Checked    int64
	ByStatus   map[int]int64
	Violations int64
	ByKind     map[Kind]int64
	First      []Violation
	WorstAge   time.Duration
	WorstAgeOf *Answer
	// perSecond counts answers and non-503 HTTP answers by the second they
	// arrived, for availability inside and outside fault windows.
	perSecond map[int64]*[2]int64
}

func newRecorder(bound time.Duration, pool *pgxpool.Pool, keep string) (*recorder, error) {
	r := &recorder{checker: Checker{Bound: bound}, pool: pool, src: NewSource(), reads: readSeconds{},
		stats: answerStats{ByStatus: map[int]int64{}, ByKind: map[Kind]int64{}, perSecond: map[int64]*[2]int64{}}}
	if keep == "" {
		return r, nil
	}
	if err := os.MkdirAll(keep, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: keep dir: %w", err)
	}
	open := func(name string) (*os.File, *bufio.Writer, *json.Encoder, error) {
		f, err := os.Create(filepath.Join(keep, name))
		if err != nil {
			return nil, nil, nil, fmt.Errorf("chaos: keep: %w", err)
		}
		w := bufio.NewWriterSize(f, 1<<16)
		return f, w, json.NewEncoder(w), nil
	}
	var err error
	r.keep = true
	if r.answersF, r.answersW, r.answersE, err = open("answers.jsonl"); err != nil {
		return nil, err
	}
	if r.commitsF, r.commitsW, r.commitsE, err = open("commits.jsonl"); err != nil {
		return nil, err
	}
	if r.violsF, r.violsW, r.violsE, err = open("violations.jsonl"); err != nil {
		return nil, err
	}
	return r, nil
}

// add records an answer (called by the load's goroutines).
func (r *recorder) add(a Answer) {
	r.mu.Lock()
	r.seq++
	a.Seq = r.seq
	r.pending = append(r.pending, a)
	r.mu.Unlock()
}

// addUnbumped hands a fault's unbumped write to the judge loop.
func (r *recorder) addUnbumped(u Unbumped) {
	r.mu.Lock()
	r.unbumpedIn = append(r.unbumpedIn, u)
	r.mu.Unlock()
}

// addViolation hands a violation a fault judged itself to the judge loop.
func (r *recorder) addViolation(v Violation) {
	r.mu.Lock()
	r.violationIn = append(r.violationIn, v)
	r.mu.Unlock()
}

// load reads the commits of every transaction that had not ended at the
// previous load (the trigger-fed history, with commit timestamps).
func (r *recorder) load(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := r.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("chaos: load history: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	at := time.Now() // the snapshot is taken by the next statement, after this instant
	var low string
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&low); err != nil {
		return fmt.Errorf("chaos: load history: %w", err)
	}
	snapBy := time.Now() // ... and before this one
	rows, err := tx.Query(ctx, `SELECT tenant_id, item_id, version, state, pg_xact_commit_timestamp(xmin)
		FROM chaos.history WHERE xid >= $1::text::xid8`, strconv.FormatUint(r.lowXid, 10))
	if err != nil {
		return fmt.Errorf("chaos: load history: %w", err)
	}
	var batch []Commit
	for rows.Next() {
		var c Commit
		var state string
		if err := rows.Scan(&c.Tenant, &c.Item, &c.Version, &state, &c.At); err != nil {
			rows.Close()
			return fmt.Errorf("chaos: load history: %w", err)
		}
		c.Deleted = state == "deleted"
		batch = append(batch, c)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("chaos: load history: %w", err)
	}
	for _, c := range batch {
		// Every commit the previous snapshot saw was loaded then: a new
		// one committed before that snapshot was still invisible to it (a
		// backend waiting for a synchronous standby).
		if !r.snapAfter.IsZero() && c.At.Before(r.snapAfter) {
			c.VisibleAfter, c.VisibleBy = r.snapAfter, snapBy
		}
		before := r.src.Len()
		r.src.Add(c)
		if r.keep && r.src.Len() > before {
			_ = r.commitsE.Encode(c) // a write error sticks in the bufio.Writer; close reports it
		}
	}
	n, err := strconv.ParseUint(low, 10, 64)
	if err != nil {
		return fmt.Errorf("chaos: load history: snapshot xmin %q: %w", low, err)
	}
	r.mu.Lock()
	in := r.unbumpedIn
	r.unbumpedIn = nil
	r.mu.Unlock()
	for _, u := range in {
		r.src.AddUnbumped(u)
	}
	r.lowXid, r.loadedAt, r.snapAfter = n, at, at
	return nil
}

// judge checks every pending answer that arrived before the loaded history's
// horizon.
func (r *recorder) judge() {
	horizon := r.loadedAt.Add(-visibilityLag)
	r.mu.Lock()
	var ready, rest []Answer
	for _, a := range r.pending {
		if a.Received.Before(horizon) {
			ready = append(ready, a)
		} else {
			rest = append(rest, a)
		}
	}
	r.pending = rest
	viols := r.violationIn
	r.violationIn = nil
	r.mu.Unlock()
	for _, x := range viols {
		r.stats.Violations++
		r.stats.ByKind[x.Kind]++
		if len(r.stats.First) < firstViolations {
			r.stats.First = append(r.stats.First, x)
		}
		if r.keep {
			_ = r.violsE.Encode(x) // a write error sticks in the bufio.Writer; close reports it
		}
	}
	for i := range ready {
		r.judgeOne(ready[i])
	}
}

func (r *recorder) judgeOne(a Answer) {
	st := &r.stats
	st.Answers++
	st.ByStatus[a.Status]++
	sec := st.perSecond[a.Received.Unix()]
	if sec == nil {
		sec = &[2]int64{}
		st.perSecond[a.Received.Unix()] = sec
	}
	sec[0]++
	if a.Status != 0 && a.Status != 503 {
		sec[1]++
	}
	r.reads.add(a)
	if !a.Cold {
		r.keys.add(a)
	}
	if r.keep {
		_ = r.answersE.Encode(a) // a write error sticks in the bufio.Writer; close reports it
	}
	if a.Status == 0 || a.Status == 503 {
		return
	}
	st.Checked++
	v := r.checker.Check(a, r.src)
	if v.Age > st.WorstAge {
		st.WorstAge = v.Age
		ac := a
		st.WorstAgeOf = &ac
	}
	for _, x := range v.Violations {
		st.Violations++
		st.ByKind[x.Kind]++
		if len(st.First) < firstViolations {
			st.First = append(st.First, x)
		}
		if r.keep {
			_ = r.violsE.Encode(x) // a write error sticks in the bufio.Writer; close reports it
		}
	}
}

// prune forgets history no pending or future answer can need.
func (r *recorder) prune() {
	r.src.Prune(r.loadedAt.Add(-r.checker.Bound - time.Minute))
}

// pendingCount is how many answers wait for the history to catch up.
func (r *recorder) pendingCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

func (r *recorder) close() error {
	if !r.keep {
		return nil
	}
	var first error
	for _, p := range []struct {
		w *bufio.Writer
		f *os.File
	}{{r.answersW, r.answersF}, {r.commitsW, r.commitsF}, {r.violsW, r.violsF}} {
		if err := p.w.Flush(); err != nil && first == nil {
			first = err
		}
		if err := p.f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
