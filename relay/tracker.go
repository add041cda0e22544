package relay

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/tidemark/schema"
)

// Tracker orders acknowledgements by transaction so that the LSN reported to
// Postgres never passes a transaction whose records Kafka does not hold yet,
// even when later transactions' records are acked first (they may live on
// other partitions).
//
// A transaction is opened with Begin before its first record, every record
// is Added before it is produced and Acked when Kafka confirms it, and Close
// seals it with its end LSN once the last record was handed over.
type Tracker struct {
	mu        sync.Mutex
	queue     []*Txn // open or not-yet-fully-acked transactions, in commit order
	confirmed schema.LSN
	inflight  int64
	notify    chan struct{}
	waiting   atomic.Bool // only a waiting reader needs a wake-up per ack
}

// Txn is one transaction (or one standalone marker batch) in the tracker.
type Txn struct {
	pending int64
	closed  bool
	end     schema.LSN
}

// NewTracker starts with everything up to start already confirmed.
func NewTracker(start schema.LSN) *Tracker {
	return &Tracker{confirmed: start, notify: make(chan struct{}, 1)}
}

// Begin opens a transaction at the tail of the queue.
func (t *Tracker) Begin() *Txn {
	x := &Txn{}
	t.mu.Lock()
	t.queue = append(t.queue, x)
	t.mu.Unlock()
	return x
}

// Add counts one more record of x as in flight.
func (t *Tracker) Add(x *Txn) {
	t.mu.Lock()
	x.pending++
	t.inflight++
	t.mu.Unlock()
}

// Ack marks one record of x as held by Kafka.
func (t *Tracker) Ack(x *Txn) {
	t.mu.Lock()
	x.pending--
	t.inflight--
	t.advanceLocked()
	t.mu.Unlock()
	if t.waiting.Load() {
		t.signal()
	}
}

// Close seals x: end is the LSN that is safe to confirm once x and every
// earlier transaction are fully acked.
func (t *Tracker) Close(x *Txn, end schema.LSN) {
	t.mu.Lock()
	x.closed, x.end = true, end
	t.advanceLocked()
	t.mu.Unlock()
	t.signal()
}

// advanceLocked pops fully acked, closed transactions from the head.
func (t *Tracker) advanceLocked() {
	n := 0
	for _, x := range t.queue {
		if !x.closed || x.pending > 0 {
			break
		}
		if x.end > t.confirmed {
			t.confirmed = x.end
		}
		n++
	}
	if n > 0 {
		clear(t.queue[:n])
		t.queue = t.queue[n:]
	}
}

// Confirmable is the newest LSN whose transaction and all earlier ones Kafka
// has acked.
func (t *Tracker) Confirmable() schema.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmed
}

// Idle reports whether nothing is open or in flight: only then may a
// keepalive's WAL end be confirmed.
func (t *Tracker) Idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.queue) == 0
}

// AdvanceIdle confirms lsn if the tracker is idle and lsn is newer. It
// reports whether it did.
func (t *Tracker) AdvanceIdle(lsn schema.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) != 0 || lsn <= t.confirmed {
		return false
	}
	t.confirmed = lsn
	return true
}

// Inflight is the number of records handed to the producer and not acked.
func (t *Tracker) Inflight() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inflight
}

// WaitBelow returns once fewer than max records are in flight, done
// fires, timeout fires, or errc delivers (its error is returned).
func (t *Tracker) WaitBelow(max int64, done <-chan struct{}, errc <-chan error, timeout <-chan time.Time) error {
	// Set before the re-check: an ack after it sees the flag and wakes us.
	t.waiting.Store(true)
	defer t.waiting.Store(false)
	for t.Inflight() >= max {
		select {
		case <-done:
			return nil
		case err := <-errc:
			return err
		case <-t.notify:
		case <-timeout:
			return nil
		}
	}
	return nil
}

// Changed is signalled (coalesced) after a close, and after an ack while
// someone waits.
func (t *Tracker) Changed() <-chan struct{} { return t.notify }

func (t *Tracker) signal() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}
