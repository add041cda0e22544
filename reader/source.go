package reader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/tidemark/catalog"
)

// ErrSource is matched (errors.Is) by every failed read of a TableSource:
// Postgres down, slow (timeout) or erroring. It is never an answer about
// the item.
var ErrSource = errors.New("reader: source read failed")

type classKey struct{}

// WithClass marks ctx as a read in class, for a caller that reads a Source
// itself under Acquire (ClassOf then tells the source).
func WithClass(ctx context.Context, class string) context.Context {
	return context.WithValue(ctx, classKey{}, class)
}

// ClassOf is the budget class a Source.Read is metered in
// (ClassForeground outside a Reader's read).
func ClassOf(ctx context.Context) string {
	if c, ok := ctx.Value(classKey{}).(string); ok {
		return c
	}
	return ClassForeground
}

// Batcher is the part of a pgx pool a TableSource needs.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TableSource reads items of a catalog table from the primary: one short
// read-committed, read-only transaction with a statement timeout, sent as
// one pipelined batch so a miss costs a single round trip. The payload is
// the table's display (catalog.Table.DisplaySQL).
type TableSource struct {
	db      Batcher
	timeout time.Duration
	sql     map[string]string // by budget class: (version, display, deleted)
}

// NewTableSource reads t through db, each read bounded by timeout (the
// Reader's SourceTimeout).
func NewTableSource(db Batcher, t catalog.Table, timeout time.Duration) *TableSource {
	// One statement per budget class, so the source itself can tell the
	// classes apart: pg_stat_statements groups statements by their parse
	// tree (comments do not count, a CTE's name does), so each class's
	// reads are one row of that view (catalog.Table.ReadSQL).
	m := map[string]string{}
	for _, class := range []string{ClassForeground, ClassBackground, ClassReadYourWrites} {
		m[class] = t.ReadSQL(class)
	}
	return &TableSource{db: db, timeout: timeout, sql: m}
}

// Read reads one item in the statement of ClassOf(ctx).
func (s *TableSource) Read(ctx context.Context, tenant, item string) (Item, error) {
	// The client-side deadline backs the server-side statement timeout up in
	// case Postgres cannot even be reached.
	ctx, cancel := context.WithTimeout(ctx, s.timeout+200*time.Millisecond)
	defer cancel()
	var it Item
	b := &pgx.Batch{}
	b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY")
	b.Queue("SELECT set_config('statement_timeout', $1, true)", strconv.FormatInt(s.timeout.Milliseconds(), 10))
	b.Queue(s.sql[ClassOf(ctx)], tenant, item).QueryRow(func(row pgx.Row) error {
		var deleted bool
		err := row.Scan(&it.Version, &it.Payload, &deleted)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		it.Found = !deleted
		if deleted {
			it.Payload = nil
		}
		return nil
	})
	b.Queue("COMMIT")
	// A failed batch leaves the connection inside a transaction; pgxpool
	// destroys such connections on release, so nothing leaks into the pool.
	if err := s.db.SendBatch(ctx, b).Close(); err != nil {
		return Item{}, fmt.Errorf("%w: %s/%s: %w", ErrSource, tenant, item, err)
	}
	return it, nil
}
