package cache_test

import (
	"context"
	"testing"
	"time"
)

// An invalidation of a key Redis has never seen (no hash: no value, no
// floor, no lease) still writes the floor. No lease is outstanding, but a
// reader can take one after the invalidation and still read the version
// before it: logical decoding may ship a commit as soon as its WAL is
// flushed, before the committing backend has made it visible to new
// snapshots. Without the floor that reader's older fill would land after
// the change's only invalidation, and the watermark would then keep the old
// value fresh.
func TestNeverSeenKeyFloorRejectsOlderFill(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		c, ctx, tn := newClient(t, b, testConfig()), context.Background(), tenant(t)
		if h := hash(t, b, "catalog", tn, "new"); len(h) != 0 {
			t.Fatalf("key exists before the test: %v", h)
		}
		if res, err := c.Invalidate(ctx, tn, "new", 42); err != nil || res != "applied" {
			t.Fatalf("invalidate v42 of a never-seen key = %v, %v", res, err)
		}
		r := lookup(t, c, tn, "new", 0) // the lease comes after the invalidation
		mustStatus(t, r, "miss", true)
		mustReject(t, c.Fill(ctx, tn, "new", r.Token, 41, payload(41), time.Now()), "version")
		if h := hash(t, b, "catalog", tn, "new"); h["floor"] != "42" || h["v"] != "" {
			t.Fatalf("hash after the rejected fill = %v, want floor 42 and no value", h)
		}
	})
}
