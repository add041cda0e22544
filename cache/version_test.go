package cache_test

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/tidemark/tidemark/cache"
)

// Versions order exactly over the whole int64 range in every script: Lua
// numbers are doubles, which cannot tell 2^53 from 2^53+1, nor tell apart
// versions near 2^63.
func TestVersionsAboveTwoToThe53(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c := newClient(t, b, testConfig())
		ctx := context.Background()
		tn := tenant(t)
		for _, base := range []int64{1 << 53, math.MaxInt64 - 2} {
			item := "i" + strconv.FormatInt(base, 10)
			inv := func(v int64, want cache.InvalidateResult) {
				t.Helper()
				got, err := c.Invalidate(ctx, tn, item, v)
				if err != nil || got != want {
					t.Fatalf("invalidate %d = %s, %v; want %s", v, got, err, want)
				}
				if f := hash(t, b, "catalog", tn, item)["floor"]; want == cache.InvalidateApplied && f != strconv.FormatInt(v, 10) {
					t.Fatalf("floor %s after invalidate %d", f, v)
				}
			}
			inv(base, cache.InvalidateApplied)
			inv(base+1, cache.InvalidateApplied)
			inv(base+1, cache.InvalidateDuplicate)
			inv(base, cache.InvalidateOlder)

			// A fill one below the floor is refused; at the floor it installs.
			r := acquire(t, c, tn, item)
			mustReject(t, c.Fill(ctx, tn, item, r.Token, base, payload(base), time.Now()), cache.ReasonVersion)
			r = acquire(t, c, tn, item)
			mustFill(t, c, tn, item, r.Token, base+1, time.Now())
			hit := lookup(t, c, tn, item, 0)
			if hit.Status != cache.StatusHit || hit.Entry.Version != base+1 {
				t.Fatalf("lookup = %s v%d, want hit v%d", hit.Status, hit.Entry.Version, base+1)
			}
			// A reader that needs one more than the cached version is not
			// served it.
			if r := lookup(t, c, tn, item, base+2); r.Status == cache.StatusHit {
				t.Fatalf("lookup(min %d) = hit v%d", base+2, r.Entry.Version)
			}
			// An invalidation one above marks it stale.
			inv(base+2, cache.InvalidateApplied)
			if r := lookup(t, c, tn, item, 0); r.Status == cache.StatusHit {
				t.Fatalf("lookup after invalidate %d = hit v%d", base+2, r.Entry.Version)
			}
		}
	})
}
