package api

import (
	"context"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/internal/lifecycle"
)

// Idempotency records (tidemark.requests) are kept for IdempotencyRetention
// (24 h by default): a client may retry a write with the same
// Idempotency-Key within that window and get the stored answer; after it the
// key may be used again. Every serve process deletes expired rows every
// minute in small batches (SKIP LOCKED, so processes never wait for each
// other), found through the requests_created_at index.

const (
	pruneEvery = time.Minute
	pruneBatch = 5000
	pruneRound = 20 * time.Second // one round's time cap: the next round continues
)

// pruneRequests deletes expired idempotency records in batches until none
// is left or the round's time is up, and returns how many it deleted.
func (s *Server) pruneRequests(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, pruneRound)
	defer cancel()
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM tidemark.requests WHERE ctid IN (
			SELECT ctid FROM tidemark.requests WHERE created_at < now() - make_interval(secs => $1)
			LIMIT $2 FOR UPDATE SKIP LOCKED)`, s.cfg.IdempotencyRetention.Seconds(), pruneBatch)
		if err != nil {
			if total > 0 && ctx.Err() != nil {
				return total, nil
			}
			return total, fmt.Errorf("api: prune idempotency records: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}

// runPruning prunes every minute until ctx ends.
func (s *Server) runPruning(ctx context.Context) {
	lifecycle.Every(ctx, pruneEvery, func() {
		n, err := s.pruneRequests(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("pruning idempotency records failed; retrying next round", "err", err)
		case n > 0:
			s.log.Debug("pruned idempotency records", "rows", n)
		}
	})
}
