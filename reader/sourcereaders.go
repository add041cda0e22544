package reader

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// SourceDB is what a Reader registers itself in on the source: a pgx pool
// (or connection) to the source's primary, where tidemark's migrations
// created tidemark.source_readers.
type SourceDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// The source registration's timing. A process refreshes its row every
// sourceEvery; the others count a row until sourceLive after it was last
// refreshed (on the source's clock), and a process stops admitting
// sourceStaleMargin before they stop counting it, so no pool raises its share
// while another still admits at the share that left room for it.
const (
	sourceEvery       = 5 * time.Second
	sourceLive        = 4 * sourceEvery
	sourceStaleMargin = 2 * time.Second
	// sourceAsk: until every other pool's readers have counted this process,
	// the rows are read again this often.
	sourceAsk = time.Second
	// sourcePrune: rows not refreshed for this long are deleted (a process
	// that died without leaving).
	sourcePrune = time.Hour
)

// sourceRegisterSQL refreshes this process's row ($1 pool, $2 instance, $3
// its budget settings, $6 the buckets' id) and prunes dead ones; it
// answers whether the registration is fresh (no row, one the others had
// stopped counting: sourceLive, $5 s, or one of other buckets), so this
// process must be counted again before it admits. Its own statement, committed before the rows are read
// (sourceReadSQL): of two processes registering at once, at least one sees
// the other.
const sourceRegisterSQL = `WITH prev AS (
    SELECT seen_at, buckets FROM tidemark.source_readers WHERE pool = $1 AND instance = $2
), pruned AS (
    DELETE FROM tidemark.source_readers
    WHERE seen_at < clock_timestamp() - $4::float8 * interval '1 second' AND NOT (pool = $1 AND instance = $2)
)
INSERT INTO tidemark.source_readers AS r (pool, instance, buckets, budget, seen_at) VALUES ($1, $2, $6, $3, clock_timestamp())
ON CONFLICT (pool, instance) DO UPDATE SET buckets = EXCLUDED.buckets, budget = EXCLUDED.budget, seen_at = EXCLUDED.seen_at
RETURNING coalesce((SELECT seen_at < r.seen_at - $5::float8 * interval '1 second' OR buckets <> $6 FROM prev), true)`

// sourceReadSQL reads the live rows ($1: sourceLive, s) and the source's
// clock.
const sourceReadSQL = `SELECT pool, buckets, budget, seen_at, clock_timestamp() FROM tidemark.source_readers
WHERE seen_at > clock_timestamp() - $1::float8 * interval '1 second'`

// sourceLeaveSQL deletes this process's row as it stops.
const sourceLeaveSQL = `DELETE FROM tidemark.source_readers WHERE pool = $1 AND instance = $2 RETURNING 1`

// sourceReaders registers this process in the source's own table of
// readers, tidemark.source_readers: one row per pool and instance, with the
// id of the buckets it admits from (the pool's, in its Redis: presence.go),
// its budget settings and when it was last seen on the source's clock. A
// source has one budget whatever pools and Redis deployments read it: each
// pool's buckets are keys of its own, in the Redis its processes use, so
// each of the k sets of buckets live on a source admits 1/k of the lowest
// settings any live reader of the source is configured with
// (budget.settle). Two deployments on one Postgres given different
// --source-pool values, or each its own Redis, spent a whole budget each.
//
// A process admits only while its view is sound (hold): registered, counted
// by the live readers of every other set of buckets (each has refreshed its
// row since this one became visible, and with it read this one's, so each
// admits at the share that leaves room for it), and refreshed within
// sourceLive less sourceStaleMargin. Without the count, the first process
// of new buckets would admit its share while the others still admit the
// whole.
type sourceReaders struct {
	db       SourceDB
	pool     string
	instance string
	settings string
	agree    func(settings []string, sets int)
	log      *slog.Logger
	errs     prometheus.Counter // nil in unit tests

	// kick asks run to register at once: the buckets' id changed (a Redis
	// that lost its data), and until the new one is registered and
	// counted this process admits nothing.
	kick chan struct{}

	mu    sync.Mutex
	state sourceState

	lastWarn warnEvery
}

// sourceState is what the last registration and read established.
type sourceState struct {
	// sent is when the last successful registration was sent (local
	// clock): the others count it until sourceLive after it, not before.
	sent time.Time
	// visible is the source's clock when this registration was first read
	// back after it committed (zero: not yet): a row of another pool seen
	// after it was refreshed by a process whose read saw this one.
	visible time.Time
	counted bool
	// ready: counted once; a process becomes ready only then.
	ready bool
	err   error // the last failure (nil after a success)
	// buckets is the id of the buckets this process admits from (the last
	// presence beat's; empty: none yet), registered the id in the row.
	buckets, registered string
}

// setBuckets takes the buckets' id from a presence beat.
func (s *sourceReaders) setBuckets(id string) {
	s.mu.Lock()
	changed := s.state.buckets != id
	s.state.buckets = id
	s.mu.Unlock()
	if changed {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// hold says why this process may not admit source reads now (empty: it
// may), and when to ask again.
func (s *sourceReaders) hold(now time.Time) (string, time.Duration) {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	switch {
	case st.sent.IsZero() || st.registered != st.buckets:
		return "not registered with the source", sourceAsk
	case !st.counted:
		return "not yet counted by the other source pools' readers", sourceAsk
	case now.After(st.sent.Add(sourceLive - sourceStaleMargin)):
		return "registration with the source is stale", sourceAsk
	}
	return "", 0
}

// readyErr is nil once this process was registered and counted (once: a
// later failure holds the budget instead of taking the process out of
// service while the cache answers).
func (s *sourceReaders) readyErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.ready {
		return nil
	}
	if s.state.err != nil {
		return fmt.Errorf("reader: registering with the source: %w", s.state.err)
	}
	return errors.New("reader: not yet registered with the source and counted by its other pools' readers")
}

// register refreshes this process's row, then reads the live ones.
func (s *sourceReaders) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, sourceAsk)
	defer cancel()
	s.mu.Lock()
	buckets := s.state.buckets
	s.mu.Unlock()
	if buckets == "" {
		return s.fail(errors.New("reader: the pool's buckets are not known yet (no presence beat has answered)"))
	}
	sent := time.Now()
	var fresh bool
	if err := s.db.QueryRow(ctx, sourceRegisterSQL, s.pool, s.instance, s.settings, sourcePrune.Seconds(), sourceLive.Seconds(), buckets).Scan(&fresh); err != nil {
		return s.fail(fmt.Errorf("reader: register in tidemark.source_readers: %w", err))
	}
	s.mu.Lock()
	s.state.sent, s.state.registered = sent, buckets
	if fresh {
		s.state.visible, s.state.counted = time.Time{}, false
	}
	s.mu.Unlock()
	return s.read(ctx)
}

// read reads the live rows: the sets of buckets on the source, the budgets
// of their readers, and whether every other set's readers count this one.
func (s *sourceReaders) read(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, sourceAsk)
	defer cancel()
	rows, now, err := readSourceRows(ctx, s.db)
	if err != nil {
		return s.fail(err)
	}
	s.mu.Lock()
	own := [2]string{s.pool, s.state.registered}
	s.mu.Unlock()
	sets := map[[2]string]bool{own: true}
	var settings []string
	var others []time.Time // when each live row of other buckets was refreshed
	for _, r := range rows {
		set := [2]string{r.pool, r.buckets}
		sets[set] = true
		settings = append(settings, r.budget)
		if set != own {
			others = append(others, r.seen)
		}
	}
	s.mu.Lock()
	st := &s.state
	if st.visible.IsZero() {
		if now.IsZero() { // no live row at all, not even this one's: read again
			s.mu.Unlock()
			return s.fail(errors.New("reader: this process's registration is not among the live readers of the source"))
		}
		st.visible = now
	}
	counted := true
	for _, seen := range others {
		counted = counted && seen.After(st.visible)
	}
	st.counted = st.counted || counted
	st.ready = st.ready || st.counted
	st.err = nil
	s.mu.Unlock()
	s.agree(settings, len(sets))
	return nil
}

// sourceRow is one live row of tidemark.source_readers.
type sourceRow struct {
	pool, buckets, budget string
	seen                  time.Time // when it was last refreshed, on the source's clock
}

// readSourceRows reads the live rows (sourceReadSQL) and the source's
// clock as it read them (zero when there is none).
func readSourceRows(ctx context.Context, db SourceDB) ([]sourceRow, time.Time, error) {
	rows, err := db.Query(ctx, sourceReadSQL, sourceLive.Seconds())
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("reader: read tidemark.source_readers: %w", err)
	}
	defer rows.Close()
	var out []sourceRow
	var now time.Time
	for rows.Next() {
		var r sourceRow
		if err := rows.Scan(&r.pool, &r.buckets, &r.budget, &r.seen, &now); err != nil {
			return nil, time.Time{}, fmt.Errorf("reader: read tidemark.source_readers: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("reader: read tidemark.source_readers: %w", err)
	}
	return out, now, nil
}

// fail records err (and counts it) and returns it.
func (s *sourceReaders) fail(err error) error {
	s.mu.Lock()
	s.state.err = err
	s.mu.Unlock()
	if s.errs != nil {
		s.errs.Inc()
	}
	return err
}

// run registers every sourceEvery, and at once when the buckets' id
// changes (and reads every sourceAsk while not counted), until ctx ends,
// then leaves.
func (s *sourceReaders) run(ctx context.Context) {
	t := time.NewTicker(sourceAsk)
	defer t.Stop()
	for {
		s.mu.Lock()
		st := s.state
		s.mu.Unlock()
		var err error
		switch {
		case st.sent.IsZero() || st.err != nil || st.registered != st.buckets || time.Since(st.sent) >= sourceEvery-sourceAsk/2:
			err = s.register(ctx)
		case !st.counted:
			err = s.read(ctx)
		}
		if err != nil && ctx.Err() == nil {
			s.warn(err)
		}
		select {
		case <-ctx.Done():
			s.leave()
			return
		case <-t.C:
		case <-s.kick:
		}
	}
}

// warn logs a failed registration, at most once per 10 s.
func (s *sourceReaders) warn(err error) {
	if s.lastWarn.allow(time.Now()) {
		s.log.Warn("registering with the source failed; once the registration is stale this process admits no source reads", "err", err)
	}
}

// leave stops admitting, then deletes this process's row so the other
// pools need not wait sourceLive to take its share back.
func (s *sourceReaders) leave() {
	s.mu.Lock()
	s.state.sent, s.state.counted = time.Time{}, false
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var gone int
	err := s.db.QueryRow(ctx, sourceLeaveSQL, s.pool, s.instance).Scan(&gone)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		s.log.Warn("reader: leaving tidemark.source_readers failed; the other pools count this process until its row is stale", "err", err)
	}
}

// SourceShare is one set of buckets live on a source: a pool's buckets in
// one Redis, and how many serve processes admit from them.
type SourceShare struct {
	Pool      string `json:"pool"`
	Buckets   string `json:"buckets"`
	Processes int    `json:"processes"`
}

// LiveSourceShares reads the sets of buckets live on the source, as every
// serve process reading it counts them: each admits 1/len of the lowest
// budget its readers are configured with.
func LiveSourceShares(ctx context.Context, db SourceDB) ([]SourceShare, error) {
	rows, _, err := readSourceRows(ctx, db)
	if err != nil {
		return nil, err
	}
	idx := map[[2]string]int{}
	var out []SourceShare
	for _, r := range rows {
		k := [2]string{r.pool, r.buckets}
		i, ok := idx[k]
		if !ok {
			i, idx[k] = len(out), len(out)
			out = append(out, SourceShare{Pool: r.pool, Buckets: r.buckets})
		}
		out[i].Processes++
	}
	slices.SortFunc(out, func(a, b SourceShare) int {
		return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.Buckets, b.Buckets))
	})
	return out, nil
}
