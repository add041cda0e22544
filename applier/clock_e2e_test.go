package applier

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/tidemark/lab/testenv"
	"github.com/tidemark/tidemark/promise"
	"github.com/tidemark/tidemark/schema"
)

// markers sends ev to every partition under its marker key.
func (r *rig) markers(ev schema.Event) {
	r.t.Helper()
	var recs []*kgo.Record
	for p := int32(0); p < r.partitions; p++ {
		recs = append(recs, &kgo.Record{Partition: p, Key: []byte(schema.MarkerKey(p)), Value: schema.Encode(ev)})
	}
	r.produce(r.manual, recs...)
}

// resetAtIs waits until reset_at is exactly want.
func (r *rig) resetAtIs(want time.Time, what string) {
	r.t.Helper()
	testenv.Eventually(r.t, 20*time.Second, what, func() error {
		if got := r.watermark().ResetAt; !got.Equal(want) {
			return fmt.Errorf("reset_at = %s, want %s", got.UTC().Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano))
		}
		return nil
	})
}

// A TRUNCATE's commit timestamp is taken before the commit is visible and
// readers' clocks may be up to the clock bound ahead: reset_at is the
// commit time plus promise.ResetMargin, and so is a reset marker's.
func TestResetsCarryTheMargin(t *testing.T) {
	t.Parallel()
	r := newRig(t, 2)
	r.start(r.config(), nil)
	commit := time.Now().Add(-10 * time.Second).Truncate(time.Millisecond)
	r.markers(&schema.Change{Op: schema.OpTruncate, LSN: 1, CommitTime: commit, Xid: 1})
	r.resetAtIs(commit.Add(promise.ResetMargin), "reset_at = TRUNCATE commit + margin")
	gap := commit.Add(5 * time.Second)
	r.markers(&schema.Reset{ResetTime: gap, Reason: "slot_missing"})
	r.resetAtIs(gap.Add(promise.ResetMargin), "reset_at = reset marker time + margin")
}

// A resolved marker an hour ahead of the cache tier's clock (Postgres's
// clock stepped, or a heartbeat sent by hand) is refused and counted; the
// partition keeps applying, and the next marker the clock allows moves W.
func TestResolvedFromTheFutureIsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1)
	run := r.start(r.config(), nil)
	r.resolved(time.Now().Add(time.Hour))
	r.produce(r.prod, changeRecord(change{"t1", "after", 3}, time.Now()))
	r.waitFloors(20*time.Second, map[string]int64{"after": 3})
	if wm := r.watermark(); wm.Known || wm.FutureRefused != 1 {
		t.Fatalf("after a marker an hour ahead: watermark %+v, want unknown with one refusal", wm)
	}
	if n := testenv.Metric(t, run.reg, "tidemark_applier_watermarks_refused_total"); n != 1 {
		t.Fatalf("tidemark_applier_watermarks_refused_total = %v, want 1", n)
	}
	good := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	r.resolved(good)
	testenv.Eventually(t, 20*time.Second, "W at the good marker", func() error {
		if wm := r.watermark(); !wm.Known || !wm.W.Equal(good) {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})
}

// A marker record whose value does not decode (a reset from a newer
// capture during a rolling upgrade, a corrupted value) moves reset_at to
// the cache tier's clock plus the margin before it is dead-lettered: the
// reset it may have carried is not lost.
func TestUndecodableMarkerMovesResetAt(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1)
	run := r.start(r.config(), nil)
	before, err := r.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	r.produce(r.manual, &kgo.Record{Partition: 0, Key: []byte(schema.MarkerKey(0)), Value: []byte(`{"schema":2,"type":"reset","reset_time":"x"}`)})
	testenv.Eventually(t, 20*time.Second, "the undecodable marker dead-lettered", func() error {
		if c := run.a.Counts(); c.DLQ != 1 {
			return fmt.Errorf("counts %+v, want 1 dlq", c)
		}
		return nil
	})
	want := before.Add(promise.ResetMargin).Truncate(time.Millisecond)
	if got := r.watermark().ResetAt; got.Before(want) {
		t.Fatalf("reset_at after an undecodable marker = %s, want at least Redis TIME before it + margin = %s",
			got.UTC().Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano))
	}
}

// Resolved markers of two sources on one partition (two deployments'
// captures on one topic) vouch for each other's caches: while both send,
// neither moves the watermark and each refusal is counted; once one has
// been silent for sourceWindow (its deployment given its own topic, or a
// restore to a new server), the other's move it again.
func TestResolvedOfTwoSourcesHoldTheWatermark(t *testing.T) {
	t.Parallel()
	r := newRig(t, 1)
	run := r.start(r.config(), nil)
	const a, b = "7301/catalog/catalog.items", "7302/catalog/catalog.items"
	first := time.Now().Add(-30 * time.Second).Truncate(time.Millisecond)
	r.markers(&schema.Resolved{ResolvedTime: first, LSN: 1, Source: a})
	testenv.Eventually(t, 20*time.Second, "W at the first source's marker", func() error {
		if wm := r.watermark(); !wm.Known || !wm.W.Equal(first) {
			return fmt.Errorf("watermark %+v", wm)
		}
		return nil
	})
	// The marker's source is recorded beside the partition's watermark,
	// for a serve process to compare with its own (cache/source.go).
	if wm := r.watermark(); wm.Sources[0] != a {
		t.Fatalf("the watermark's source = %q, want %q", wm.Sources[0], a)
	}
	r.markers(&schema.Resolved{ResolvedTime: first.Add(time.Second), LSN: 2, Source: b})
	r.markers(&schema.Resolved{ResolvedTime: first.Add(2 * time.Second), LSN: 3, Source: a})
	testenv.Eventually(t, 20*time.Second, "both sources' markers refused", func() error {
		if n := testenv.Metric(t, run.reg, "tidemark_applier_source_conflicts_total"); n != 2 {
			return fmt.Errorf("tidemark_applier_source_conflicts_total = %v, want 2", n)
		}
		return nil
	})
	if wm := r.watermark(); !wm.W.Equal(first) {
		t.Fatalf("watermark %s moved past %s while two sources sent markers", wm.W, first)
	}
	// The second source silent: the first's markers vouch again once it
	// has been for sourceWindow.
	testenv.Eventually(t, sourceWindow+30*time.Second, "W moved by the first source's marker alone", func() error {
		at := time.Now().Add(-time.Second).Truncate(time.Millisecond)
		r.markers(&schema.Resolved{ResolvedTime: at, LSN: 4, Source: a}) // one a poll: the source's heartbeat
		if wm := r.watermark(); !wm.W.After(first.Add(2 * time.Second)) {
			return fmt.Errorf("watermark %s", wm.W)
		}
		return nil
	})
}
