//go:build tidemark_broken_invalidate

package cache

// Built only with the tag tidemark_broken_invalidate, for the chaos
// harness's own test (chaos/chaos_test.go): INVALIDATE acknowledges every
// event without raising the floor or marking the cached value stale, so the
// watermark keeps extending values the source has replaced. A verifier that
// passes this binary is not checking anything.
func init() { invalidateLua = "return 0" }
