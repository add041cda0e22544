package reader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark/tidemark/cache"
	"github.com/tidemark/tidemark/internal/lifecycle"
)

// identityEvery is how often a running reader claims its namespace's
// identity again: a record lost with its Redis node is rewritten, and one a
// process of another mapping or pool claimed meanwhile is found.
const identityEvery = 5 * time.Second

// Claim checks this reader's table mapping and source pool against its
// namespace's identity record (cache.Identity), storing them if the
// namespace has none yet. A reader of another mapping or pool than the one
// the namespace is bound to gets an error naming both (errors.Is
// cache.ErrIdentity) and from then on answers nothing from the cache and
// fills nothing: it would serve, and leave for others, rows of another
// table under the same keys. Any other error is Redis's (Run claims again).
func (rd *Reader) Claim(ctx context.Context) error {
	err := rd.cache.ClaimIdentity(ctx, cache.Identity{Mapping: rd.cfg.Mapping, Pool: rd.cfg.SourcePool})
	if errors.Is(err, cache.ErrIdentity) {
		if rd.foreign.CompareAndSwap(nil, &err) {
			rd.log.Error("refusing the namespace: it is bound to another deployment; reads go to the source and nothing is filled", "err", err)
		}
		return fmt.Errorf("reader: %w", err)
	}
	if err == nil {
		rd.claimed.Store(true)
	}
	return err
}

// ErrNotClaimed is IdentityErr's answer before any claim succeeded.
var ErrNotClaimed = errors.New("reader: the namespace's identity is not claimed yet")

// IdentityErr is why this reader may not use the cache tier for its
// namespace: the refusal (errors.Is cache.ErrIdentity), ErrNotClaimed while
// no claim has succeeded, or nil. A process is not ready meanwhile: it
// could otherwise be sent visitors a moment before a refusal stops it.
func (rd *Reader) IdentityErr() error {
	if err := rd.foreign.Load(); err != nil {
		return *err
	}
	if !rd.claimed.Load() {
		return ErrNotClaimed
	}
	return nil
}

// runIdentity claims the identity every identityEvery until ctx ends or a
// claim is refused, which it returns.
func (rd *Reader) runIdentity(ctx context.Context) error {
	var refused error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lifecycle.Every(ctx, identityEvery, func() {
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		defer ccancel()
		if err := rd.Claim(cctx); errors.Is(err, cache.ErrIdentity) {
			refused = err
			cancel()
		}
	})
	return refused
}

// cacheable says whether this read may use the cache tier, and if not, the
// Cache-Status detail of why: a clock out of bounds, or a namespace bound
// to another deployment.
func (rd *Reader) cacheable() (bool, string) {
	if !rd.clock.Trusted() {
		return false, "detail=clock"
	}
	if rd.foreign.Load() != nil {
		return false, "detail=identity"
	}
	return true, ""
}
