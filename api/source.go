package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"tidemark/catalog"
	"time"

	"github.com/jackc/pgx/v5"
)

// errSource is matched (errors.Is) by every failed source read: Postgres
// down, slow (timeout) or erroring. It is never an answer about the item.
var errSource = errors.New("api: source read failed")

// sourceItem is one row of the catalog table as a source read saw it.
type sourceItem struct {
	Found   bool // a row exists (active or tombstone)
	Deleted bool
	Version int64
	Display []byte // raw JSON; nil for a tombstone
}

// Batcher is the part of a pgx pool the source reader needs.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// source reads items from the primary: one short read-committed,
// read-only transaction with a statement timeout, sent as one pipelined batch
// so a miss costs a single round trip.
type source struct {
	db      Batcher
	timeout time.Duration
	sql     map[string]string // by budget class (readSQL): (version, display, deleted)
}

// readSQL is the read of one item per budget class, so the source itself
// can tell the classes apart: pg_stat_statements groups statements by their
// parse tree (comments do not count, a CTE's name does), so each class's
// reads are one row of that view (catalog.Table.ReadSQL).
func readSQL(t catalog.Table) map[string]string {
	m := map[string]string{}
	for _, class := range []string{classForeground, classBackground, classReadYourWrites} {
		m[class] = t.ReadSQL(class)
	}
	return m
}

func (s *source) read(ctx context.Context, class, tenant, item string) (sourceItem, error) {
	// The client-side deadline backs the server-side statement timeout up in
	// case Postgres cannot even be reached.
	ctx, cancel := context.WithTimeout(ctx, s.timeout+200*time.Millisecond)
	defer cancel()
	var it sourceItem
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY")
	b.Queue("SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(s.timeout.Milliseconds(), 10))
	b.Queue(s.sql[class], tenant, item).QueryRow(func(row pgx.Row) error {
		var deleted bool
		err := row.Scan(&it.Version, &it.Display, &deleted)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		it.Found, it.Deleted = true, deleted
		if it.Deleted {
			it.Display = nil
		}
		return nil
	})
	b.Queue("COMMIT")
	// A failed batch leaves the connection inside a transaction; pgxpool
	// destroys such connections on release, so nothing leaks into the pool.
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return sourceItem{}, fmt.Errorf("%w: %s/%s: %w", errSource, tenant, item, err)
	}
	return it, nil
}
