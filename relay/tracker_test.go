package relay

import (
	"testing"

	"github.com/tidemark/tidemark/schema"
)

// Acks arriving out of order (records of later transactions on faster
// partitions) never let the confirmable LSN pass an unacked transaction.
func TestTrackerConfirmsOnlyAckedPrefix(t *testing.T) {
	tr := NewTracker(100)
	a, b, c := tr.Begin(), tr.Begin(), tr.Begin()
	for _, x := range []*Txn{a, a, b, c} {
		tr.Add(x)
	}
	tr.Close(a, 200)
	tr.Close(b, 300)
	tr.Close(c, 400)
	want := func(l schema.LSN) {
		t.Helper()
		if got := tr.Confirmable(); got != l {
			t.Fatalf("confirmable %s, want %s", got, l)
		}
	}
	tr.Ack(c)
	tr.Ack(b)
	want(100)
	tr.Ack(a)
	want(100) // a still has one record in flight
	tr.Ack(a)
	want(400)
	if tr.Inflight() != 0 || !tr.Idle() {
		t.Fatalf("inflight %d idle %v", tr.Inflight(), tr.Idle())
	}
	// An open transaction (no COMMIT yet) holds everything after it.
	d := tr.Begin()
	if tr.AdvanceIdle(900) {
		t.Fatal("keepalive confirmed past an open transaction")
	}
	tr.Close(d, 500)
	want(500)
	if !tr.AdvanceIdle(900) {
		t.Fatal("idle keepalive not confirmed")
	}
	want(900)
}
